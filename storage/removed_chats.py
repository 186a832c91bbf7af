"""Chats a bot was removed from (a Telegram group that kicked it, a private chat whose person blocked it).

The platform says so once, to whichever replica received the update (Telegram's `my_chat_member`); kept in
one process's memory, only that process failed later replies there at once, and only until it restarted.
Stored here by the inbox (`InboundMessage.bot_removed`), the mark is read by every replica's outbox in the
query that reads the reply's conversation anyway (`removed_from_its_chat`): no statement more per send, and no copy
in memory that another replica's "added back" could leave stale. The platform's notice of the bot's return
clears it, and so does a reply that went out answering a message the chat sent after the removal: only a
bot in the chat receives one, so its return was missed (an update dropped, a webhook set without
`my_chat_member`), and the mark would otherwise refuse that chat's replies for good (`still_removed`); the
mark it read, that is: a removal marked while it was sent (another replica's refused send) stands.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, case, delete
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from gateway.models import as_utc
from storage.models import Conversation, RemovedChat
from storage.upsert import dialect_insert


async def mark_removed(session: AsyncSession, *, bot: str, channel: str, chat: str, removed: bool,
                       at: datetime, read: datetime | None = None) -> None:
    """Record that `bot` was removed from `chat` at `at` (the latest removal kept), or is back in it: with
    `read`, back since the removal of that date (the mark a send read), not since one marked after it."""
    if not removed:
        # A reply that went out ends the mark it read, not one another replica's refused send set meanwhile.
        newer_kept = () if read is None else (RemovedChat.removed_at <= read,)
        await session.execute(delete(RemovedChat).where(RemovedChat.bot == bot, RemovedChat.channel == channel,
                                                        RemovedChat.chat == chat, *newer_kept))
        return
    # One statement, so two replicas told at once (a notice and a refused send) do not collide on the key. The
    # latest removal: one kept from before a return unheard let through each reply to a question asked since.
    insert = dialect_insert(session, RemovedChat).values(bot=bot, channel=channel, chat=chat, removed_at=at)
    later = case((insert.excluded.removed_at > RemovedChat.removed_at, insert.excluded.removed_at),
                 else_=RemovedChat.removed_at)
    await session.execute(insert.on_conflict_do_update(index_elements=["bot", "channel", "chat"],
                                                       set_={"removed_at": later}))


def removed_from_its_chat() -> ColumnElement[bool]:
    """Joins the `Conversation` of a query to the mark of its chat (at most one row: the mark's key), whose
    `removed_at` is then when the bot was removed from it, or None."""
    return and_(RemovedChat.bot == Conversation.bot, RemovedChat.channel == Conversation.channel,
                RemovedChat.chat == Conversation.chat)


def still_removed(removed_at: datetime | None, *, heard_at: datetime | None) -> datetime | None:
    """`removed_at`, unless the message being answered was sent in the chat after it (`heard_at`): the bot
    is back in the chat then, though its return was not heard."""
    if removed_at is not None and heard_at is not None and as_utc(heard_at) > as_utc(removed_at):
        return None
    return removed_at
