"""Setting one key of a message's `meta` in the database itself: one UPDATE … RETURNING on SQLite and
PostgreSQL alike, where reading the row under its lock and writing the whole `meta` back took two
statements (a round trip each on PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import String, case, cast, func, literal, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import Message
from storage.text import storable_json


def _merged(dialect: str, key: str, value: Any):
    """`messages.meta` with `key` set to `value` (the rest as stored; a `meta` that is no object is `{}`)."""
    encoded = json.dumps(storable_json(value))
    if dialect == "postgresql":
        # `meta` is `json`: merged as jsonb (`||` is jsonb's), read back as `json`.
        stored = case((func.json_typeof(Message.meta) == "object", cast(Message.meta, JSONB)),
                      else_=cast(literal("{}"), JSONB))
        return cast(stored.op("||")(func.jsonb_build_object(key, cast(literal(encoded), JSONB))), Message.meta.type)
    stored = case((func.json_type(Message.meta) == "object", Message.meta), else_=literal("{}", String))
    return func.json_set(stored, f'$."{key}"', func.json(literal(encoded, String)), type_=Message.meta.type)


async def set_meta_key(session: AsyncSession, *, message_id: int, key: str, value: Any) -> dict[str, Any]:
    """Set `meta[key]` of message `message_id` to `value` (`storable_json` applied) as the row stands when
    the UPDATE takes its lock, so a change of another key committed meanwhile stays; the whole `meta` as
    written (NoResultFound when there is no such message)."""
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    return (await session.execute(update(Message).where(Message.id == message_id)
                                  .values(meta=_merged(dialect, key, value)).returning(Message.meta))).scalar_one()
