"""Messages written into a store at an older migration, as its schema holds them (before 0016 there is no
`messages.sender`): the ORM's writers fill every column of the newest schema, which an old store refuses."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, column, table
from sqlalchemy.ext.asyncio import AsyncEngine

_CONVERSATIONS = table("conversations", *map(column, (
    "id", "bot", "channel", "workspace", "chat", "thread", "state", "unanswered_turns", "created_at", "updated_at")))
_MESSAGES = table("messages", *map(column, (
    "conversation_id", "bot", "channel", "direction", "author", "external_id", "text", "status", "attempts",
    "created_at", "updated_at")), *(column(name, JSON) for name in (
        "attachments", "meta", "citations", "tool_calls", "retrieved", "provider_ids")))


def old_message(external_id: str, meta: dict[str, Any], *, direction: str = "in") -> dict[str, Any]:
    """A message of the conversation `store_old` makes, as every migration since 0001 holds one."""
    now = datetime.now(timezone.utc)
    return {"bot": "acme", "channel": "telegram", "direction": direction,
            "author": "contact" if direction == "in" else "bot", "external_id": external_id, "text": "hi",
            "status": "done", "attempts": 1, "created_at": now, "updated_at": now, "attachments": [], "meta": meta,
            "citations": [], "tool_calls": [], "retrieved": [], "provider_ids": []}


async def store_old(engine: AsyncEngine, messages: list[dict[str, Any]]) -> None:
    """A conversation (Telegram group -100group of bot acme) and `messages` (`old_message`s) in it."""
    now = datetime.now(timezone.utc)
    async with engine.begin() as conn:
        conversation = (await conn.execute(_CONVERSATIONS.insert().values(
            bot="acme", channel="telegram", workspace="", chat="-100group", thread="", state="bot",
            unanswered_turns=0, created_at=now, updated_at=now).returning(_CONVERSATIONS.c.id))).scalar_one()
        await conn.execute(_MESSAGES.insert(), [{**message, "conversation_id": conversation} for message in messages])
