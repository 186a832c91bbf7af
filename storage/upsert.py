"""INSERT … ON CONFLICT in the session's dialect (PostgreSQL's or SQLite's): rows two writers may add at once."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


def insert_ignore(session: AsyncSession, model: type, values: dict[str, Any], conflict: list[str]):
    """INSERT … ON CONFLICT (`conflict`) DO NOTHING, in the session's dialect: a row two writers may add at once."""
    return dialect_insert(session, model).values(**values).on_conflict_do_nothing(index_elements=conflict)


def dialect_insert(session: AsyncSession, model: type):
    """The session's dialect's INSERT of `model`, which has ON CONFLICT (PostgreSQL's or SQLite's)."""
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)
