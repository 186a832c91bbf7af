"""The passwords of `database_url` and `redis_url` (and a `*_PASSWORD` variable) are redacted from log lines
as a driver decodes and quotes them, and the words a password begins with stay readable elsewhere in a line."""

from __future__ import annotations

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
