"""A chat that moved to a new id (a Telegram group upgraded to a supergroup): its conversations follow it.

Telegram gives the supergroup a new chat id and tells it twice (`migrate_to_chat_id` in the old chat,
`migrate_from_chat_id` in the new one), and a send to the old id is refused with the new one: each of the
three moves the conversations, so the move is idempotent (a second finds nothing left at the old id).
What is keyed by the conversation (its messages, replies not yet sent, an operator's hold, escalations)
moves with it; the outbox reads the chat at send time, so a queued reply goes to the new id. A move that
finds workers answering in both conversations of a pair leaves that pair, and is recorded
(`unfinished_chat_moves`) until a try finds it done, so any process, a restarted one too, finishes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.models import MEMBER_SCOPE, as_utc, utcnow
from storage.message_meta import sent_by
from storage.meta_keys import merged_meta
from storage.models import Contact, Conversation, Escalation, EscalationEvent, Message, UnfinishedChatMove, Usage
from storage.upsert import insert_ignore


@dataclass(frozen=True, slots=True)
class ChatMove:
    """What a move did: conversations renamed, merged away (into the one of the pair that stays), or left
    (busy: both of a pair held by workers)."""

    moved: tuple[int, ...] = ()
    merged: tuple[int, ...] = ()
    busy: tuple[int, ...] = ()


async def move_chat(session: AsyncSession, *, bot: str, channel: str, old: str, new: str,
                    workspace: str = "") -> ChatMove:
    """Move `bot`'s conversations in chat `old` to chat `new`, and the chat's own identity with them (an
    anonymous admin writes as the group itself: contact `old`, conversation thread `member:<old>`)."""
    if old == new:
        return ChatMove()
    # The escalations first, then the conversations: the order every operator transition takes them in
    # (a reply locks its escalation, then writes to the conversation). Conversations first, a merge and a
    # reply each held a row the other waited for, and PostgreSQL aborted one of them.
    await session.execute(select(Escalation.id).join(Conversation, Escalation.conversation_id == Conversation.id)
                          .where(Conversation.bot == bot, Conversation.channel == channel,
                                 Conversation.workspace == workspace, Conversation.chat.in_((old, new)))
                          .order_by(Escalation.id).with_for_update(of=Escalation))
    rows = (await session.execute(select(Conversation).where(
        Conversation.bot == bot, Conversation.channel == channel, Conversation.workspace == workspace,
        Conversation.chat == old).order_by(Conversation.id).with_for_update())).scalars().all()
    moved: list[int] = []
    merged: list[int] = []
    busy: list[int] = []
    for conversation in rows:
        thread = _renamed_thread(conversation.thread, old, new)
        there = (await session.execute(select(Conversation).where(
            Conversation.bot == bot, Conversation.channel == channel, Conversation.workspace == workspace,
            Conversation.chat == new, Conversation.thread == thread).with_for_update())).scalar_one_or_none()
        if there is not None and _leased(conversation) and _leased(there):
            # A worker answers in each: neither row may go from under it. The next notice merges them
            # (Telegram sends two, and a send to the old id a third); only a race with all three is left.
            busy.append(conversation.id)
            continue
        await _unquote_waiting(session, conversation.id, old=old)
        if there is None:
            conversation.chat, conversation.thread = new, thread
            moved.append(conversation.id)
        elif _leased(conversation):
            # A worker answers in the old conversation (and sends under its lease, so the refused send's
            # notice always finds it held): the new chat's conversation merges into it, which takes the new
            # id. Skipping it instead left it at the old id for good when it was held at every notice.
            await _merge(session, source=there, into=conversation)
            await session.flush()  # `there` is gone before its ref is taken
            conversation.chat, conversation.thread = new, thread
            moved.append(conversation.id)
            merged.append(there.id)
        else:
            await _merge(session, source=conversation, into=there)
            merged.append(conversation.id)
    # What the group wrote as itself (its anonymous admins) names its new id, as its contact does: left at the
    # old one, `gateway forget` of the group found its contact and none of what it wrote before the move. In
    # `meta.sender` too, in the same statement: a turn reads its question's sender there (the identity its tools
    # authorize against, `conversation_and_sender`), so one waiting across the move was answered as nobody known.
    await session.execute(update(Message).where(Message.conversation_id.in_(select(Conversation.id).where(
        Conversation.bot == bot, Conversation.channel == channel, Conversation.workspace == workspace,
        Conversation.chat == new)), sent_by(old)).values(
        sender=new, meta=merged_meta(session.bind.dialect.name, {"sender": new}))
        .execution_options(synchronize_session=False))
    await _move_contact(session, channel=channel, old=old, new=new)
    # Last, after the rows above, in the order every move takes them (the escalations, then the conversations).
    key = {"bot": bot, "channel": channel, "workspace": workspace, "chat": old}
    if busy:  # any process tries it again (`unfinished_moves`): Telegram does not tell the upgrade again
        await session.execute(insert_ignore(session, UnfinishedChatMove, {**key, "new_chat": new, "since": utcnow()},
                                            list(key)))
    else:
        await session.execute(delete(UnfinishedChatMove).filter_by(**key))
    await session.flush()
    return ChatMove(moved=tuple(moved), merged=tuple(merged), busy=tuple(busy))


async def unfinished_moves(session: AsyncSession) -> list[UnfinishedChatMove]:
    """The moves that left a pair of conversations both held by workers, oldest first, to be tried again."""
    return list((await session.execute(select(UnfinishedChatMove).order_by(UnfinishedChatMove.since))).scalars())


async def _unquote_waiting(session: AsyncSession, conversation_id: int, *, old: str) -> None:
    """Questions still waiting for their answer were the old chat's messages: their answer cannot quote them
    in the new one, whose message ids start over (the same id there is someone else's message). Without
    the id, the answer names the member instead, as an operator's reply does. So are questions answered
    whose reply is not out yet (queued, or waiting out a retry): the outbox reads the quote at send time."""
    unsent_replies = select(Message.reply_to_id).where(
        Message.conversation_id == conversation_id, Message.direction == "out",
        Message.status.in_(("pending", "sending")), Message.reply_to_id.is_not(None))
    waiting = (await session.execute(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "in",
        or_(Message.status == "pending", Message.id.in_(unsent_replies))))).scalars()
    for message in waiting:
        meta = dict(message.meta or {})
        if meta.pop("platform_message_id", None) is not None:
            message.meta = meta | {"moved_from_chat": old}


def _leased(conversation: Conversation) -> bool:
    return conversation.lease_until is not None and as_utc(conversation.lease_until) > utcnow()


def _renamed_thread(thread: str, old: str, new: str) -> str:
    return MEMBER_SCOPE + new if thread == MEMBER_SCOPE + old else thread


async def _merge(session: AsyncSession, *, source: Conversation, into: Conversation) -> None:
    """`source`'s rows into `into` (one of them the conversation a message in the new chat opened before
    the move was heard of), then `source` goes. An operator's hold of `source` holds `into`."""
    for model in (Message, Escalation, EscalationEvent, Usage):
        await session.execute(update(model).where(model.conversation_id == source.id)
                              .values(conversation_id=into.id).execution_options(synchronize_session=False))
    if into.state == "bot" and source.state != "bot":
        into.state, into.assigned_operator = source.state, source.assigned_operator
        into.unanswered_turns = source.unanswered_turns
    if into.contact_id is None:
        into.contact_id = source.contact_id
    await session.execute(delete(Conversation).where(Conversation.id == source.id)
                          .execution_options(synchronize_session=False))


async def _move_contact(session: AsyncSession, *, channel: str, old: str, new: str) -> None:
    """The group's own contact (its anonymous admins write as the group) takes the new id, unless the new
    id has one already: then conversations point at that one."""
    contact = (await session.execute(select(Contact).where(
        Contact.channel == channel, Contact.external_id == old))).scalar_one_or_none()
    if contact is None:
        return
    existing = (await session.execute(select(Contact.id).where(
        Contact.channel == channel, Contact.external_id == new))).scalar_one_or_none()
    if existing is None:
        contact.external_id = new
    else:
        await session.execute(update(Conversation).where(Conversation.contact_id == contact.id)
                              .values(contact_id=existing).execution_options(synchronize_session=False))
