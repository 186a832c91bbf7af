"""Async engine and session factory for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


def async_url(url: str) -> str:
    """Normalize a database URL to its async driver (aiosqlite or asyncpg)."""
    parsed = make_url(url)
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    if parsed.drivername == "postgresql+asyncpg" and "sslmode" in parsed.query:
        # libpq's `?sslmode=require`, as managed databases give their URLs, is asyncpg's `ssl`: passed on
        # as it was, every connection failed with "connect() got an unexpected keyword argument 'sslmode'".
        mode = parsed.query["sslmode"]
        parsed = parsed.difference_update_query(["sslmode"]).update_query_dict({"ssl": mode} if "ssl" not in
                                                                                parsed.query else {})
    return parsed.render_as_string(hide_password=False)


def asyncpg_dsn(url: str) -> str:
    """A PostgreSQL URL as `asyncpg.connect(dsn)` reads it: libpq's spelling, `sslmode` for the `ssl`
    that SQLAlchemy's asyncpg dialect takes (a DSN's unknown `ssl` would be sent as a server setting)."""
    parsed = make_url(async_url(url)).set(drivername="postgresql")
    if "ssl" in parsed.query:
        parsed = parsed.difference_update_query(["ssl"]).update_query_dict({"sslmode": parsed.query["ssl"]})
    return parsed.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    """True for any SQLite URL."""
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database, or an in-memory or `file:` URI one)."""
    database = make_url(url).database if is_sqlite(url) else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def create_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """Build the async engine; on SQLite, make the folder and turn on WAL and a busy timeout."""
    url = async_url(url)
    if is_sqlite(url):
        database = sqlite_file(url)
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30})

        first_connection = [True]

        @event.listens_for(engine.sync_engine, "do_connect")
        def _owner_only_file(*_args) -> None:
            # At the engine's first connection, not here: a command run from the wrong folder (whose
            # schema check then fails) must not leave an empty database behind. Only the first: a file
            # that goes away later (its volume unmounted) is an unavailable database, not a new one.
            # It holds every transcript: a new file is readable by its owner only, whatever the umask.
            if not first_connection[0]:
                return
            first_connection[0] = False
            if database is not None and not database.exists():
                database.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            # WAL lets the CLI ingest while the server reads; the timeout waits out short locks.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _sqlite_row_lock(_conn, cursor, _statement, _parameters, context, _executemany) -> None:
            # SQLite drops FOR UPDATE, and its driver opens a transaction only at the first write, so two
            # read-check-write transactions (add an operator note, finish a message) would interleave and
            # one would overwrite the other. Taking the database's write lock where PostgreSQL would lock the
            # row serializes them as the row lock does there: the second waits (busy_timeout), then reads
            # what the first committed.
            compiled = getattr(context, "compiled", None)
            if getattr(getattr(compiled, "statement", None), "_for_update_arg", None) is None:
                return
            # (aiosqlite's connection, under SQLAlchemy's adapter: it says whether sqlite3 opened one.)
            if not cursor._connection.in_transaction:  # after a write in this transaction, the lock is held
                cursor.execute("BEGIN IMMEDIATE")

        return engine
    return create_async_engine(url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=10)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded attributes after commit (we pass rows around after commits)."""
    return async_sessionmaker(engine, expire_on_commit=False)
