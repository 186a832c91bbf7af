"""Recording a send's outcome: the reply's row settled (or scheduled for a retry), the parts that reached
the customer stored as its deliveries, and what the platform said of the chat kept for the next replies.

The platform has the outcome by then, so a database briefly away (a restart, a failover) is waited out:
giving up would leave the row `sending`, and the requeue of stalled sends would send the reply a second time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.backoff import doubling
from gateway.models import utcnow
from storage import repositories as repo
from storage.models import Contact, Conversation, DataDeletion, Delivery, Message
from storage.opt_outs import opt_out
from storage.removed_chats import mark_removed

RECORD_ATTEMPTS = 15  # about a minute of backoff: longer than a database restart or failover


async def record_outcome(sessions: async_sessionmaker[AsyncSession], message: Message, *, chat: str, status: str,
                         error: str | None, meta: dict, provider_ids: list[str], removed_at: datetime | None,
                         opted_out_contact: int | None, removed_since: datetime | None, bound) -> None:
    """Store `status` (sent, failed, or retry: pending again) on `message`, in `chat`. `removed_at` is the
    chat's removal mark the send read (a reply that went out ends it); `opted_out_contact`, a contact the
    platform said opted out (of the reply's bot); `removed_since`, when a refused send said the bot was removed from the chat."""
    with_parts = status == "sent"
    record_attempt = 0
    while True:
        try:
            async with sessions() as session, session.begin():
                # What it marks besides the reply, locked before the reply's row, in the order `gateway forget`
                # takes them (contact, conversation, then its messages): the other way round, each held what
                # the other waited for, "deadlock detected" on PostgreSQL.
                if opted_out_contact is not None:
                    await session.execute(select(Contact.id).where(Contact.id == opted_out_contact).with_for_update())
                if status == "sent" and "template" in meta:
                    await session.execute(select(Conversation.id).where(
                        Conversation.id == message.conversation_id).with_for_update())
                recorded = (await session.execute(
                    update(Message).where(Message.id == message.id).values(
                        status="pending" if status == "retry" else status, error=error, meta=meta,
                        provider_ids=provider_ids if status != "retry" else [], updated_at=utcnow(),
                        sent_at=utcnow() if status == "sent" else None,
                    ).returning(Message.id).execution_options(synchronize_session=False)
                )).scalar_one_or_none()
                marks = {"chat": chat, "ended": removed_at if status == "sent" else None, "since": removed_since}
                if recorded is None:
                    # Erased while it was sent: its parts are not kept (their rows' foreign key would fail), nor a
                    # mark on a chat gone with it (a private chat's id is the person's). A group outlives a member
                    # `gateway forget` erased: its chat is the others', marked as for any reply.
                    kept = await _chat_outlives_it(session, message)
                    bound.info(await _erased_by(session, message, chat_kept=kept), status=status,
                               provider_ids=provider_ids)
                    if kept:
                        await _mark_chat(session, message, **marks)
                    return
                if status == "sent" and "template" in meta:  # its text waits for the customer's next message
                    await repo.mark_held_behind_template(session, message.conversation_id, reply_id=message.id)
                if opted_out_contact is not None:  # so the bot's next replies are refused here, not one by one by the platform
                    await opt_out(session, bot=message.bot, contact_id=opted_out_contact, at=utcnow())
                await _mark_chat(session, message, **marks)
                if with_parts:
                    for provider_id in dict.fromkeys(str(p) for p in provider_ids):
                        session.add(Delivery(message_id=message.id, channel=message.channel, provider_id=provider_id))
            return
        except IntegrityError:
            # No retry makes a constraint pass. The reply is out: record that at once, without its
            # parts (its ids stay on the message), rather than leave it `sending` to be sent again.
            if not with_parts:
                raise
            bound.error("outbound.parts_not_recorded", provider_ids=provider_ids)
            with_parts = False
        except (DBAPIError, OSError) as exc:
            record_attempt += 1
            if record_attempt == RECORD_ATTEMPTS:
                raise
            bound.warning("outbound.record_retry", status=status, error=type(exc).__name__, attempt=record_attempt)
            await asyncio.sleep(doubling(record_attempt, first=0.5, cap=5.0))


async def _mark_chat(session: AsyncSession, message: Message, *, chat: str, ended: datetime | None,
                     since: datetime | None) -> None:
    """A reply that went out ends the chat's removal mark it read (`ended`: the bot is back in the chat,
    `still_removed`); a send refused as the bot's removal marks it (`since`), so every replica refuses the
    next replies there at once, until the platform says the bot is back."""
    if ended is not None:
        await mark_removed(session, bot=message.bot, channel=message.channel, chat=chat, removed=False,
                           at=utcnow(), read=ended)
    if since is not None:
        await mark_removed(session, bot=message.bot, channel=message.channel, chat=chat, removed=True, at=since)


async def _chat_outlives_it(session: AsyncSession, message: Message) -> bool:
    """Whether the conversation of `message`, whose row is gone, is still there: `gateway forget` of a group's
    member erases their messages and the replies to them, and leaves the others' conversation."""
    return (await session.execute(select(Conversation.id).where(
        Conversation.id == message.conversation_id))).scalar_one_or_none() is not None


async def _erased_by(session: AsyncSession, message: Message, *, chat_kept: bool) -> str:
    """The event telling what erased `message` as it was sent: `outbound.forgotten` (`gateway forget`) or
    `outbound.purged` (the retention purge, which deletes only whole conversations)."""
    if chat_kept:
        return "outbound.forgotten"
    # Whichever deleted it has committed, and its audit row (counts only) with it: the latest of those that
    # could have is that one. By id, not time: the purge runs on the leader, whose clock is not this one's.
    latest = (await session.execute(select(DataDeletion.kind).where(or_(
        (DataDeletion.kind == "forget") & (DataDeletion.channel == message.channel),
        (DataDeletion.kind == "retention") & (DataDeletion.bot == message.bot))
    ).order_by(DataDeletion.id.desc()).limit(1))).scalar_one_or_none()
    return "outbound.purged" if latest == "retention" else "outbound.forgotten"
