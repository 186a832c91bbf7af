"""Setting keys of a message's `meta` in the database itself: one UPDATE … RETURNING on SQLite and
PostgreSQL alike, where reading the row under its lock and writing the whole `meta` back took two
statements (a round trip each on PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Numeric, String, and_, case, cast, false, func, literal, or_, true, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import Message
from storage.text import storable_json


def merged_meta(dialect: str, changes: dict[str, Any], dropped: tuple[str, ...] = ()):
    """`messages.meta` without the keys `dropped`, then with `changes` set (the rest as stored; a `meta` that is
    no object is `{}`)."""
    changes = storable_json(changes)
    if dialect == "postgresql":
        # `meta` is `json`: merged as jsonb (`-` and `||` are jsonb's), read back as `json`.
        stored = case((func.json_typeof(Message.meta) == "object", cast(Message.meta, JSONB)),
                      else_=cast(literal("{}"), JSONB))
        for key in dropped:
            stored = stored.op("-")(literal(key, String))
        return cast(stored.op("||")(cast(literal(json.dumps(changes)), JSONB)), Message.meta.type)
    stored = case((func.json_type(Message.meta) == "object", Message.meta), else_=literal("{}", String))
    if dropped:
        stored = func.json_remove(stored, *(f'$."{key}"' for key in dropped))
    pairs = [part for key, value in changes.items()
             for part in (f'$."{key}"', func.json(literal(json.dumps(value), String)))]
    return func.json_set(stored, *pairs, type_=Message.meta.type)


def stored_revision_before(dialect: str, revision: tuple[int, ...] | None):
    """SQL: a revision `revision` is newer than the message's `meta.revision` (none stored: it is). Only when that
    is sure: one stored in another shape (an update id alone, from before edits were ordered by their date) is
    false here, for the caller to compare as `gateway.inbox._newer` does."""
    if revision is None:
        return true()
    if dialect == "postgresql":
        def kind(*path: str):
            return func.json_typeof(func.json_extract_path(Message.meta, *path))

        length = func.json_array_length(func.json_extract_path(Message.meta, "revision"))
        number = ("number",)

        def element(i: int):
            return cast(func.json_extract_path_text(Message.meta, "revision", str(i)), Numeric)
    else:
        def kind(*path: str):
            return func.json_type(Message.meta, "$." + "".join(f"[{p}]" if p.isdigit() else p for p in path))

        length = func.json_array_length(Message.meta, "$.revision")
        number = ("integer", "real")

        def element(i: int):
            return func.json_extract(Message.meta, f"$.revision[{i}]")
    # Lexicographic, as Python compares tuples; an element that is no number is NULL, and so is the comparison.
    before = false()
    for i in reversed(range(len(revision))):
        stored = case((kind("revision", str(i)).in_(number), element(i)))
        before = or_(stored < revision[i], and_(stored == revision[i], before))
    return or_(kind("revision").is_(None), kind("revision") == "null",
               and_(kind("revision") == "array", case((kind("revision") == "array", length)) == len(revision), before))


async def set_meta_key(session: AsyncSession, *, message_id: int, key: str, value: Any) -> dict[str, Any] | None:
    """Set `meta[key]` of message `message_id` to `value` (`storable_json` applied) as the row stands when
    the UPDATE takes its lock, so a change of another key committed meanwhile stays; the whole `meta` as
    written (None when there is no such message: erased by `gateway forget` meanwhile)."""
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    return (await session.execute(update(Message).where(Message.id == message_id)
                                  .values(meta=merged_meta(dialect, {key: value})).returning(Message.meta))).scalar_one_or_none()
