"""The passwords of `database_url` and `redis_url` (and a `*_PASSWORD` variable) are redacted from log lines
as a driver decodes and quotes them, and the words a password begins with stay readable elsewhere in a line."""

from __future__ import annotations

import pytest

from gateway.observability.logs import configure_logging_for, redact
from tests.conftest import write_config


def _configured(tmp_path, monkeypatch, *, database_url: str, env: dict[str, str] | None = None) -> None:
    from gateway.settings import load_settings

    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/1")
    configure_logging_for(load_settings(write_config(tmp_path, database_url=database_url)), level="WARNING",
                          fmt="json")


def test_a_password_with_a_plus_and_an_escape_is_redacted_as_the_driver_decodes_it(tmp_path, monkeypatch):
    """A URL's userinfo is percent-decoded, its `+` kept (SQLAlchemy, asyncpg, libpq): `p%40ss+word` is
    `p@ss+word` to the driver, whose error quoted it whole (it was decoded as a form's, `p@ss word`)."""
    _configured(tmp_path, monkeypatch, database_url="postgresql://app:p%40ss+word-9876@127.0.0.1:9/db")
    assert redact('password "p@ss+word-9876" refused') == 'password "[REDACTED]" refused'


@pytest.mark.parametrize("where", ["database_url", "DB_PASSWORD"])
def test_a_line_ending_in_the_word_a_password_begins_with_is_kept(tmp_path, monkeypatch, where):
    """A password that begins with a word (`postgres-prod-2026`) made every line ending in that word read as one
    cut short inside the password: "could not connect to postgres" became "could not connect to [REDACTED]".
    A cut that reaches past the word (`postgres-pr`) is still redacted."""
    password = "postgres-prod-2026"
    if where == "database_url":
        _configured(tmp_path, monkeypatch, database_url=f"postgresql://app:{password}@127.0.0.1:9/db")
    else:
        _configured(tmp_path, monkeypatch, database_url="postgresql://app@127.0.0.1:9/db",
                    env={"DB_PASSWORD": password})
    assert redact(f"refused {password}") == "refused [REDACTED]"
    assert redact("could not connect to postgres") == "could not connect to postgres"
    assert redact("migrating the postgres…") == "migrating the postgres…"
    assert redact("the driver said: password postgres-pr…") == "the driver said: password [REDACTED]…"
