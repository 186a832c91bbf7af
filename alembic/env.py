"""Alembic environment: runs migrations on the async engine the gateway itself uses."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from storage.engine import create_engine, is_sqlite
from storage.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from gateway.database_settings import load_database_settings

        url = load_database_settings().database_url
    return url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=is_sqlite(_url()),  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # A URL's `options=-c statement_timeout=…` (or lock_timeout) is for the gateway's queries: it
            # cancelled the wait below and any migration longer than it, and the replica did not start.
            connection.execute(text("SET LOCAL statement_timeout = 0"))
            connection.execute(text("SET LOCAL lock_timeout = 0"))
            # Replicas may all run `db upgrade` at start: one migrates, the others wait, then find nothing to do.
            connection.execute(text("SELECT pg_advisory_xact_lock(7418265)"))
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(_url())
    async with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite drops a column by copying the table and dropping the old one, and with the engine's
            # foreign keys on, that drop cascaded: a downgrade of a `conversations` column deleted every
            # message and escalation. Off for the migration only (SQLite ignores it inside a transaction).
            await connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        await connection.run_sync(_run)
        await connection.commit()
        if sqlite:
            await connection.exec_driver_sql("PRAGMA foreign_keys=ON")
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_online())
