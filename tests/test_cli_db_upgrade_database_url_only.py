"""`gateway db upgrade` uses the database URL alone: a mistake elsewhere in the config (a bot's unknown model, a
misspelt key, a channel's placeholder secret in production) refused the migration with a config error."""

from __future__ import annotations

import sqlite3

from gateway.cli import main
from gateway.preflight import migration_revisions
from tests.conftest import write_config

UNRELATED_MISTAKES = [{"name": "acme", "model": "no-such-model", "sytem_prompt": "hi",
                       "channels": {"slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}"}}}]


def _revision(database) -> str:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def test_db_upgrade_migrates_past_a_mistake_elsewhere_in_the_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "changeme")  # a placeholder: refused in production by every other command
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = write_config(tmp_path, bots=UNRELATED_MISTAKES, environment="production", no_such_key=1)
    assert main(["chat", "--config", str(config)]) == 2  # the config is bad, and the other commands say so
    assert capsys.readouterr().err.startswith("config error: ")
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("database was created at the latest migration") and err == ""
    assert _revision(tmp_path / "gateway.db") == migration_revisions()[0]


def test_db_upgrade_still_checks_the_database_url_and_takes_the_environments(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = write_config(tmp_path, database_url="mysql://u@h/db", bots=UNRELATED_MISTAKES)
    assert main(["db", "upgrade", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == (
        "config error: database_url: unsupported database driver 'mysql'; use SQLite (sqlite:// or sqlite+aiosqlite://) "
        "or PostgreSQL (postgresql:// or postgresql+asyncpg://)")
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'from-env.db'}")  # overrides the file
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    assert _revision(tmp_path / "from-env.db") == migration_revisions()[0]
    monkeypatch.setenv("DATABASE_URL", "")
    assert main(["db", "upgrade", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith("config error: database_url: is empty")


def test_db_upgrade_refuses_a_misspelt_database_url_rather_than_migrate_the_default(tmp_path, capsys, monkeypatch):
    """Reading `database_url` alone, a misspelt one (`databse_url`) was a key it never looked at: it migrated the
    default SQLite file instead, said so as a success, and only `serve` then told the misspelling."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(f"databse_url: sqlite+aiosqlite:///{tmp_path / 'meant.db'}\nno_such_key: 1\n")
    assert main(["db", "upgrade", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == "config error: databse_url: unknown key; did you mean database_url?"
    assert not (tmp_path / "var").exists() and not (tmp_path / "meant.db").exists()


def test_a_bad_database_url_from_the_environment_is_not_blamed_on_the_files_unset_variable(tmp_path, capsys,
                                                                                          monkeypatch):
    """`database_url: ${DB_URL}` with DB_URL unset and a bad DATABASE_URL: the error said `(${DB_URL} is not set, so
    database_url is empty)` of a value that was neither empty nor the file's, and then that the environment gave it."""
    monkeypatch.delenv("DB_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "mysql://u@h/db")
    config = tmp_path / "config.yaml"
    config.write_text("database_url: ${DB_URL}\n")
    for command in (["db", "upgrade"], ["ingest-runs"]):
        assert main([*command, "--config", str(config)]) == 2
        assert capsys.readouterr().err.strip() == (
            "config error: database_url: unsupported database driver 'mysql'; use SQLite (sqlite:// or "
            "sqlite+aiosqlite://) or PostgreSQL (postgresql:// or postgresql+asyncpg://) (from the environment variable "
            "DATABASE_URL, which overrides the file)"), command
    monkeypatch.delenv("DATABASE_URL")  # the file's own empty value still names its variable
    assert main(["db", "upgrade", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == "config error: database_url: is empty; use sqlite+aiosqlite:///path/to.db " \
                                              "or postgresql://user@host/db (${DB_URL} is not set, so database_url is empty)"
