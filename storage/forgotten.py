"""The messages `gateway forget` deleted, remembered by a sha256 of where each was, and nothing else.

A private chat's edit of a message never stored is stored as the question (its first delivery failed and may still
come, `gateway.models.may_still_come`), and so is a group member's edit that adds the bot's @mention
(`InboundMessage.new_if_never_stored`). A forgotten message is one never stored to the inbox: its edit, which
Telegram, Slack and Discord send with the whole new text, stored it again. The forget keeps, for each inbound message
it deletes, the sha256 of its bot, channel, chat and platform message id (`forgotten_key`); an edit whose key is
there is ignored (`gateway.inbox.Inbox._revise`), and so is a redelivery of the message itself (a platform's
retry, a Telegram update sent again: `repositories.store_inbound`). No text, name, user id or chat id is kept. The retention job
drops a key after `FORGOTTEN_KEPT_DAYS`; an edit later than that, of a group message to ask the bot, is a question
asked anew.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.models import utcnow
from storage.models import Conversation, ForgottenMessage, Message
from storage.upsert import dialect_insert

FORGOTTEN_KEPT_DAYS = 30
"""How long a forgotten message's key is kept: longer than a private chat's edit is a question
(`NEVER_STORED_EDIT_WINDOW`, 23 hours), and than nearly every edit of a group message."""


class MessageForgotten(Exception):
    """A delivery of a message `gateway forget` deleted (its key is kept): `store_inbound` stores nothing of it. Raised
    out of the transaction, so the contact and conversation it upserted first are rolled back, not made anew."""


def forgotten_key(bot: str, channel: str, chat: str, platform_message_id: str) -> str:
    """The sha256 (hex) that stands for a message: what an edit of it names (`InboundMessage.revises` in its chat)."""
    return hashlib.sha256(json.dumps([bot, channel, chat, platform_message_id]).encode()).hexdigest()


async def remember_forgotten(session: AsyncSession, where, *, params_per_statement: int = 1000) -> int:
    """Keep the key of each inbound message `where` selects, before the caller deletes them; how many it read.
    Each INSERT binds at most `params_per_statement` values (2 a key), the bound the caller keeps every statement to."""
    platform_id = Message.meta["platform_message_id"].as_string()
    rows = (await session.execute(
        select(Message.bot, Message.channel, Conversation.chat, platform_id)
        .join(Conversation, Message.conversation_id == Conversation.id)
        .where(Message.direction == "in", platform_id.is_not(None), where))).all()
    now = utcnow()
    keys = sorted({forgotten_key(bot, channel, chat, str(pid)) for bot, channel, chat, pid in rows})
    rows = max(1, params_per_statement // 2)
    for start in range(0, len(keys), rows):
        await session.execute(dialect_insert(session, ForgottenMessage).values(
            [{"key": key, "forgotten_at": now} for key in keys[start:start + rows]])
            .on_conflict_do_nothing(index_elements=["key"]))
    return len(keys)


async def was_forgotten(session: AsyncSession, *, bot: str, channel: str, chat: str, platform_message_id: str) -> bool:
    """Whether `gateway forget` deleted the message (`forgotten_key`) within `FORGOTTEN_KEPT_DAYS`."""
    key = forgotten_key(bot, channel, chat, platform_message_id)
    return (await session.execute(select(ForgottenMessage.key).where(ForgottenMessage.key == key))).first() is not None


async def drop_old_forgotten(session: AsyncSession, now: datetime | None = None) -> int:
    """Drop the keys kept longer than `FORGOTTEN_KEPT_DAYS` (the retention job); how many."""
    cutoff = (now or utcnow()) - timedelta(days=FORGOTTEN_KEPT_DAYS)
    return (await session.execute(delete(ForgottenMessage).where(ForgottenMessage.forgotten_at < cutoff))).rowcount
