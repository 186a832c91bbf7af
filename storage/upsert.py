"""INSERT … ON CONFLICT in the session's dialect (PostgreSQL's or SQLite's): rows two writers may add at once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


def insert_ignore(session: AsyncSession, model: type, values: dict[str, Any], conflict: list[str], *, unless=None):
    """INSERT … ON CONFLICT (`conflict`) DO NOTHING, in the session's dialect: a row two writers may add at once.
    With `unless` (an EXISTS), nothing is inserted while it holds either, tested by the same statement
    (INSERT … SELECT … WHERE NOT EXISTS): no round trip more."""
    insert = dialect_insert(session, model)
    if unless is None:
        return insert.values(**values).on_conflict_do_nothing(index_elements=conflict)
    columns = model.__table__.c
    row = select(*(literal(value, columns[name].type).label(name) for name, value in values.items())).where(~unless)
    return insert.from_select(list(values), row).on_conflict_do_nothing(index_elements=conflict)


def dialect_insert(session: AsyncSession, model: type):
    """The session's dialect's INSERT of `model`, which has ON CONFLICT (PostgreSQL's or SQLite's)."""
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)
