"""Chats a bot was removed from (a Telegram group that kicked it, a private chat whose person blocked it).

The platform says so once, to whichever replica received the update (Telegram's `my_chat_member`); kept in
one process's memory, only that process failed later replies there at once, and only until it restarted.
Stored here by the inbox (`InboundMessage.bot_removed`), the mark is read by every replica's outbox in the
query that reads the reply's conversation anyway (`removed_from_its_chat`): no statement more per send, and no copy
in memory that another replica's "added back" could leave stale. The platform's notice of the bot's return
clears it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, delete
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from storage.models import Conversation, RemovedChat
from storage.repositories import insert_ignore


async def mark_removed(session: AsyncSession, *, bot: str, channel: str, chat: str, removed: bool,
                       at: datetime) -> None:
    """Record that `bot` was removed from `chat` at `at` (the earliest removal kept), or is back in it."""
    if not removed:
        await session.execute(delete(RemovedChat).where(RemovedChat.bot == bot, RemovedChat.channel == channel,
                                                        RemovedChat.chat == chat))
        return
    # One statement, so two replicas told at once (a notice and a refused send) do not collide on the key.
    await session.execute(insert_ignore(session, RemovedChat, {"bot": bot, "channel": channel, "chat": chat,
                                                               "removed_at": at}, ["bot", "channel", "chat"]))


def removed_from_its_chat() -> ColumnElement[bool]:
    """Joins the `Conversation` of a query to the mark of its chat (at most one row: the mark's key), whose
    `removed_at` is then when the bot was removed from it, or None."""
    return and_(RemovedChat.bot == Conversation.bot, RemovedChat.channel == Conversation.channel,
                RemovedChat.chat == Conversation.chat)
