"""Data access for contacts, conversations and messages.

Functions take an `AsyncSession` and never commit: the caller owns the transaction. Inserts that
may race (two webhooks for one new conversation, a platform retrying a delivery) use the
dialect's INSERT … ON CONFLICT DO NOTHING, so they are safe on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.models import OPT_COMMANDS, OPT_IN, OPT_OUTS, ConversationRef, InboundMessage, utcnow
from storage import opt_outs
from storage.forgotten import MessageForgotten, forgotten_key
from storage.message_meta import PLATFORM_META, first_stored_edit_key, inbound_meta
from storage.models import Contact, Conversation, ForgottenMessage, Message
from storage.text import storable_json, storable_text
from storage.upsert import dialect_insert, insert_ignore


async def upsert_contact(session: AsyncSession, *, channel: str, external_id: str, display_name: str,
                         seen_at: datetime | None = None) -> Contact:
    """The contact for this channel identity, created on first sight; name and last-seen refreshed.

    One statement (INSERT … ON CONFLICT DO UPDATE … RETURNING): it was an insert, a read and an update,
    three round trips on every inbound message."""
    now = seen_at or utcnow()
    # A name is what the platform's user wrote: one past the column (VARCHAR(255) on PostgreSQL) failed the
    # insert, and with it the message, which the platform then retried in vain.
    display_name = display_name[:Contact.display_name.type.length]
    insert = dialect_insert(session, Contact).values(
        channel=channel, external_id=external_id, display_name=display_name, created_at=now, last_inbound_at=now)
    # A message without a name (some platforms omit it) keeps the one known.
    name = case((insert.excluded.display_name != "", insert.excluded.display_name), else_=Contact.display_name)
    upsert = insert.on_conflict_do_update(index_elements=["channel", "external_id"], set_={
        "display_name": name, "last_inbound_at": insert.excluded.last_inbound_at}).returning(Contact)
    return (await session.execute(select(Contact).from_statement(upsert),
                                  execution_options={"populate_existing": True})).scalar_one()


async def get_or_create_conversation(session: AsyncSession, *, bot: str, ref: ConversationRef,
                                     contact_id: int | None) -> Conversation:
    """The conversation for (bot, channel reference), created on first message."""
    key = {"bot": bot, "channel": ref.channel, "workspace": ref.workspace, "chat": ref.chat, "thread": ref.thread}
    # KEY SHARE, as the message's foreign key takes it anyway: a worker parking the conversation for a burst
    # takes FOR UPDATE first (`Worker._park_burst`), so either it waits for this transaction and reads its
    # message, or this read waits for the park and sees it (`Inbox.accept` ends it). Read unlocked, a park
    # committed between this read and the insert was missed by both.
    locked = select(Conversation).filter_by(**key).with_for_update(read=True, key_share=True)
    # Read first: most messages come in a conversation that exists, and the insert is then one round trip too many.
    found = (await session.execute(locked)).scalar_one_or_none()
    if found is not None:
        return found
    now = utcnow()
    await session.execute(
        insert_ignore(session, Conversation, {**key, "contact_id": contact_id, "state": "bot",
                                               "unanswered_turns": 0, "created_at": now, "updated_at": now},
                       list(key))
    )
    return (await session.execute(locked)).scalar_one()


@dataclass(frozen=True, slots=True)
class StoredInbound:
    """The outcome of storing an inbound delivery."""

    message_id: int
    conversation_id: int
    contact_id: int
    duplicate: bool
    lease_owner: str | None = None  # the conversation's, as read before the insert (parked by a burst?)


async def store_inbound(session: AsyncSession, *, bot: str, message: InboundMessage,
                        traceparent: str | None = None) -> StoredInbound:
    """Store an inbound message exactly once per (bot, channel, external_id); `traceparent` lets the
    worker continue the receiving request's trace."""
    contact = await upsert_contact(session, channel=message.channel, external_id=message.sender.external_id,
                                   display_name=message.sender.display_name)
    conversation = await get_or_create_conversation(session, bot=bot, ref=message.conversation,
                                                    contact_id=contact.id)
    if conversation.contact_id is None:
        conversation.contact_id = contact.id
    now = utcnow()
    meta = inbound_meta(message)
    if meta.get("command") == OPT_IN and await opt_outs.opted_out_at(session, bot=bot, contact_id=contact.id) is None:
        meta["command"] = "start"  # someone beginning, not coming back: the greeting, not "you'll hear from us again"
    # Stored already from an edit (`first_stored_edit_key`) when its first delivery failed and the edit that made
    # it a question came before the platform's retry of it (Slack's, Telegram's): the same message, so its retry
    # is that one's duplicate, neither answered twice nor put back to the text the member replaced. Asked in the
    # insert, of the delivery key's index: no round trip more.
    edit_key = first_stored_edit_key(message.conversation.chat, meta["platform_message_id"])
    delivered = (Message.bot == bot, Message.channel == message.channel, Message.direction == "in")
    if edit_key != message.external_id:
        same = select(Message.id).where(*delivered, Message.external_id == edit_key)
    else:  # itself the edit's copy: `Inbox._revise` found its first version unstored in a transaction of its own,
        # and a retry of that version stored since is the message (the edit applied to it, as to any stored one).
        # Both writers upsert the sender's contact first, whose row lock orders the two inserts on PostgreSQL.
        same = select(Message.id).join(Conversation, Message.conversation_id == Conversation.id).where(
            *delivered, Conversation.chat == message.conversation.chat,
            Message.meta["platform_message_id"].as_string() == meta["platform_message_id"])
    # A redelivery of a message `gateway forget` deleted (storage/forgotten.py) is not stored again: asked by the insert.
    gone = select(ForgottenMessage.key).where(ForgottenMessage.key == forgotten_key(
        bot, message.channel, message.conversation.chat, meta["platform_message_id"])).exists()
    result = await session.execute(
        insert_ignore(session, Message, {
            "conversation_id": conversation.id, "bot": bot, "channel": message.channel, "direction": "in",
            "author": "contact", "external_id": message.external_id, "sender": meta["sender"], "text": message.text,
            "attachments": [_attachment_dict(a) for a in message.attachments], "citations": [],
            "meta": meta | ({"traceparent": traceparent} if traceparent else {}),
            "tool_calls": [], "retrieved": [], "provider_ids": [], "status": "pending", "attempts": 0,
            "created_at": now, "updated_at": now, "sent_at": message.sent_at,
        }, ["bot", "channel", "direction", "external_id"], unless=same.exists() | gone).returning(Message.id)
    )
    inserted = result.scalar_one_or_none()
    if inserted is not None:
        opt = (message.raw or {}).get("command") if isinstance(message.raw, dict) else None
        if opt in OPT_OUTS:  # WhatsApp STOP / START, to this bot alone (only a first delivery: a retry changes nothing)
            await opt_outs.opt_out(session, bot=bot, contact_id=contact.id, at=now)
        elif opt in OPT_COMMANDS:
            await opt_outs.opt_in(session, bot=bot, contact_id=contact.id)
        if conversation.held_template_id is not None and opt not in OPT_OUTS and \
                await opt_outs.opted_out_at(session, bot=bot, contact_id=contact.id) is None:  # STOP answers no template
            await _resend_after_template(session, conversation)
        return StoredInbound(message_id=inserted, conversation_id=conversation.id, contact_id=contact.id,
                             duplicate=False, lease_owner=conversation.lease_owner)
    # A repeated delivery: the row stored the first time (its conversation may have been another), or the same message
    # stored from its edit (or, for the edit's copy, from its first version).
    stored = (await session.execute(select(Message.id, Message.conversation_id).where(
        *delivered, or_(Message.external_id == message.external_id, Message.id.in_(same))).order_by(Message.id)
        .limit(1))).one_or_none()
    if stored is None:  # nothing of it stored, and nothing inserted: its key says `gateway forget` deleted it
        raise MessageForgotten(message.external_id)
    return StoredInbound(message_id=stored.id, conversation_id=stored.conversation_id,
                         contact_id=contact.id, duplicate=True)


async def _resend_after_template(session: AsyncSession, conversation: Conversation) -> None:
    """Queue again, as text, the replies a WhatsApp template went out in place of (outside the 24 hours):
    the customer saw only the template, and their answer to it opens the window for the reply itself.
    Queued before this message, so it is sent before this message is answered; once per reply. Run only
    while the conversation's `held_template_id` is set (the outbox sets it), which it then clears unless a
    template went out meanwhile: the look-up was one query more for every WhatsApp message stored."""
    seen = conversation.held_template_id
    recent = (await session.execute(select(Message).where(
        Message.conversation_id == conversation.id, Message.direction == "out").order_by(Message.id.desc())
        .limit(20))).scalars()
    for held in reversed([m for m in recent if (m.meta or {}).get("template") and "text_sent_as" not in m.meta]):
        copy = await add_outbound(session, conversation=conversation, text=held.text, author=held.author,
                                  reply_to_id=held.reply_to_id, citations=held.citations)
        copy.meta = {"after_template": held.id}
        held.meta = {**held.meta, "text_sent_as": copy.id}
    await session.execute(update(Conversation).where(Conversation.id == conversation.id,
                                                     Conversation.held_template_id == seen)
                          .values(held_template_id=None).execution_options(synchronize_session=False))


async def mark_held_behind_template(session: AsyncSession, conversation_id: int, *, reply_id: int) -> None:
    """The outbox sent the WhatsApp template in place of `reply_id`: its text waits for the customer's next
    message, which `store_inbound` then looks at for it (and only then)."""
    await session.execute(update(Conversation).where(Conversation.id == conversation_id)
                          .values(held_template_id=reply_id).execution_options(synchronize_session=False))


async def add_edit_to_answer(session: AsyncSession, *, of: Message, text: str) -> Message:
    """A pending message of `of`'s with its edited `text`, answered as a turn of its own after `of`'s
    answer (stored before it, so the history holds both): an edit that arrived while `of` was answered."""
    now = utcnow()
    edit = Message(
        conversation_id=of.conversation_id, bot=of.bot, channel=of.channel, direction="in", author=of.author,
        external_id=f"{of.external_id}~edit{of.id}"[-255:], sender=of.sender, text=text,
        attachments=list(of.attachments or []),
        meta={k: v for k, v in (of.meta or {}).items() if k in PLATFORM_META} | {"edit_of": of.id},
        citations=[], tool_calls=[], retrieved=[], provider_ids=[], status="pending", attempts=0,
        created_at=now, updated_at=now, sent_at=of.sent_at)
    session.add(edit)
    await session.flush()
    return edit


def _attachment_dict(attachment: Any) -> dict[str, Any]:
    return {k: getattr(attachment, k) for k in ("kind", "url", "file_id", "mime_type", "caption")
            if getattr(attachment, k) is not None}


async def add_outbound(session: AsyncSession, *, conversation: Conversation, text: str, author: str = "bot",
                       reply_to_id: int | None = None, citations: list[dict] | None = None,
                       tool_calls: list[dict] | None = None, retrieved: list[dict] | None = None,
                       status: str = "pending", external_id: str | None = None) -> Message:
    """Store a reply before it is sent (the outbox). `external_id` (an operator reply's idempotency key)
    is unique per (bot, channel, direction): a second row with it fails the flush (IntegrityError)."""
    now = utcnow()
    # A model's text can hold NUL or half an emoji (its two surrogates streamed in two chunks), and so can
    # a tool's result: refused by PostgreSQL (and surrogates by SQLite), the turn could never be stored.
    message = Message(
        conversation_id=conversation.id, bot=conversation.bot, channel=conversation.channel, direction="out",
        author=author, text=storable_text(text), reply_to_id=reply_to_id, citations=storable_json(citations or []),
        external_id=external_id, tool_calls=storable_json(tool_calls or []), retrieved=storable_json(retrieved or []),
        attachments=[], provider_ids=[], meta={},
        status=status, attempts=0, created_at=now, updated_at=now,
    )
    session.add(message)
    await session.flush()
    return message


async def outbound_by_external_id(session: AsyncSession, *, conversation: Conversation,
                                  external_id: str) -> Message | None:
    """The reply stored under `external_id` in this conversation's bot and channel, if there is one."""
    return (await session.execute(select(Message).where(
        Message.bot == conversation.bot, Message.channel == conversation.channel, Message.direction == "out",
        Message.external_id == external_id))).scalar_one_or_none()


async def history(session: AsyncSession, *, conversation_id: int, limit: int,
                  before_id: int | None = None) -> list[Message]:
    """The last `limit` messages (before `before_id`, when given), oldest first (ignored inbound left out)."""
    query = select(Message).where(Message.conversation_id == conversation_id, Message.status.not_in(("ignored",)))
    if before_id is not None:
        query = query.where(Message.id < before_id)
    rows = (await session.execute(query.order_by(Message.id.desc()).limit(limit))).scalars().all()
    return list(reversed(rows))


async def last_customer_messages(session: AsyncSession, *, conversation_ids: list[int]) -> dict[int, Message]:
    """Each conversation's newest customer message (ignored ones left out), by conversation id."""
    if not conversation_ids:
        return {}
    newest = (select(func.max(Message.id)).where(
        Message.conversation_id.in_(conversation_ids), Message.direction == "in", Message.author == "contact",
        Message.status.not_in(("ignored",))).group_by(Message.conversation_id))
    rows = (await session.execute(select(Message).where(Message.id.in_(newest)))).scalars().all()
    return {m.conversation_id: m for m in rows}


async def first_customer_message(session: AsyncSession, *, conversation_id: int) -> Message | None:
    """The customer's first message in a conversation (what they came for), ignored ones left out."""
    return (await session.execute(
        select(Message).where(Message.conversation_id == conversation_id, Message.direction == "in",
                              Message.status.not_in(("ignored",)))
        .order_by(Message.id).limit(1)
    )).scalar_one_or_none()


async def transcript(session: AsyncSession, *, conversation_id: int, after_id: int = 0,
                     limit: int = 200) -> list[Message]:
    """Messages of a conversation after `after_id`, oldest first."""
    return list((await session.execute(
        select(Message).where(Message.conversation_id == conversation_id, Message.id > after_id)
        .order_by(Message.id).limit(limit)
    )).scalars().all())


async def find_conversation(session: AsyncSession, *, bot: str, ref: ConversationRef) -> Conversation | None:
    """The conversation for this reference, if it exists."""
    return (await session.execute(select(Conversation).filter_by(
        bot=bot, channel=ref.channel, workspace=ref.workspace, chat=ref.chat, thread=ref.thread))).scalar_one_or_none()


# --- work claiming -------------------------------------------------------------------------------

async def conversations_with_work(session: AsyncSession, *, now: datetime, limit: int = 50) -> list[int]:
    """Conversations that have pending inbound or unsent outbound messages and no live lease."""
    # Both directions named, so the (direction, status) index serves the lookup.
    pending = select(Message.conversation_id).where(
        Message.direction.in_(("in", "out")), Message.status == "pending"
    ).distinct().subquery()
    rows = await session.execute(
        select(Conversation.id).where(
            Conversation.id.in_(select(pending.c.conversation_id)),
            or_(Conversation.lease_until.is_(None), Conversation.lease_until < now),
        ).order_by(Conversation.updated_at).limit(limit)
    )
    return [r[0] for r in rows]


async def try_lease(session: AsyncSession, *, conversation_id: int, owner: str, seconds: float) -> bool:
    """Atomically take (or extend) the conversation's lease; False when another worker holds it."""
    now = utcnow()
    result = await session.execute(
        update(Conversation).where(
            Conversation.id == conversation_id,
            or_(Conversation.lease_until.is_(None), Conversation.lease_until < now, Conversation.lease_owner == owner),
        ).values(lease_owner=owner, lease_until=now + timedelta(seconds=seconds))
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


async def release_lease(session: AsyncSession, *, conversation_id: int, owner: str) -> None:
    """Give the lease back so the next message can be taken at once."""
    await session.execute(
        update(Conversation).where(Conversation.id == conversation_id, Conversation.lease_owner == owner)
        .values(lease_owner=None, lease_until=None).execution_options(synchronize_session=False)
    )


async def park_lease(session: AsyncSession, *, conversation_id: int, owner: str, parked_owner: str,
                     until: datetime) -> None:
    """Hand the owner's lease to `parked_owner`, whom no worker matches, until `until`: nothing in the
    conversation moves before then, and no worker spins on it."""
    await session.execute(
        update(Conversation).where(Conversation.id == conversation_id, Conversation.lease_owner == owner)
        .values(lease_owner=parked_owner, lease_until=until).execution_options(synchronize_session=False)
    )


async def end_park(session: AsyncSession, *, conversation_id: int, parked_owner: str) -> None:
    """Free the conversation now if it is parked by `parked_owner` (its lease given back: any worker takes it)."""
    await session.execute(
        update(Conversation).where(Conversation.id == conversation_id, Conversation.lease_owner == parked_owner)
        .values(lease_owner=None, lease_until=None).execution_options(synchronize_session=False)
    )


async def requeue_stalled_sends(session: AsyncSession, *, now: datetime, older_than: timedelta,
                                keep: list[int]) -> int:
    """Put back to `pending` the replies left `sending` for longer than `older_than` in conversations
    nobody holds a lease on, except those in `keep`; returns how many."""
    unleased = select(Conversation.id).where(or_(Conversation.lease_until.is_(None), Conversation.lease_until < now))
    return await _requeue_sending(session, now=now, older_than=older_than,
                                  where=(Message.conversation_id.in_(unleased), Message.conversation_id.not_in(keep)))


async def requeue_sends_after_crash(session: AsyncSession, *, now: datetime, older_than: timedelta) -> int:
    """Put back to `pending` every reply left `sending` for longer than `older_than`, whoever holds its
    conversation's lease (at start: this process's previous run left them); returns how many."""
    return await _requeue_sending(session, now=now, older_than=older_than, where=())


async def requeue_stalled_send(session: AsyncSession, *, message_id: int, now: datetime, older_than: timedelta) -> bool:
    """Put one reply left `sending` for longer than `older_than` back to `pending`; True when it was."""
    return await _requeue_sending(session, now=now, older_than=older_than, where=(Message.id == message_id,)) == 1


async def _requeue_sending(session: AsyncSession, *, now: datetime, older_than: timedelta, where: tuple) -> int:
    """Replies left `sending` for longer than `older_than` (and matching `where`) back to `pending`."""
    result = await session.execute(
        update(Message).where(Message.direction == "out", Message.status == "sending",
                              Message.updated_at < now - older_than, *where)
        .values(status="pending").execution_options(synchronize_session=False))
    return result.rowcount


async def next_pending(session: AsyncSession, *, conversation_id: int) -> Message | None:
    """The oldest unfinished message of a conversation: unsettled replies first, then inbound in order.

    An unsettled reply is `pending` (to send) or `sending`: being sent right now (an escalation or
    operator message, sent outside the worker's lease) or left so by a dead replica. It is returned so
    the caller waits for it instead of letting a later reply overtake it. One statement (it was one per
    direction, twice per message: to take it, and to find the conversation done)."""
    return (await session.execute(next_pending_query(conversation_id))).scalar_one_or_none()


def next_pending_query(conversation_id: int):
    """`next_pending`'s statement (bench/query_plans.py explains it)."""
    unsettled = (Message.direction == "out") & Message.status.in_(("pending", "sending"))
    waiting = (Message.direction == "in") & (Message.status == "pending")
    return (select(Message).where(Message.conversation_id == conversation_id, unsettled | waiting)
            .order_by(case((Message.direction == "out", 0), else_=1), Message.id).limit(1))


async def queue_depth(session: AsyncSession) -> int:
    """How many inbound messages wait for an answer."""
    return (await session.execute(
        select(func.count()).select_from(Message).where(Message.direction == "in", Message.status == "pending")
    )).scalar_one()


async def outbox_depth(session: AsyncSession) -> int:
    """How many replies are stored and not yet sent: waiting, retrying or being sent."""
    return (await session.execute(
        select(func.count()).select_from(Message).where(Message.direction == "out",
                                                        Message.status.in_(("pending", "sending")))
    )).scalar_one()


async def conversation_and_sender(session: AsyncSession, inbound: Message
                                  ) -> tuple[Conversation | None, Contact | None, datetime | None]:
    """The message's conversation, who sent it (the identity tools authorize against), and when they opted out
    of its bot (WhatsApp STOP, else None), in one statement: in a group chat or a shared thread the
    conversation's contact is whoever wrote first; the message names its sender. (None, None, None) when the
    conversation is gone."""
    sender = (inbound.meta or {}).get("sender")
    who = and_(Contact.channel == inbound.channel, Contact.external_id == sender) if sender \
        else Contact.id == Conversation.contact_id
    query = select(Conversation, Contact).select_from(Conversation).outerjoin(Contact, who).where(
        Conversation.id == inbound.conversation_id)
    conversation, found, stopped = (await session.execute(opt_outs.with_opt_out(
        query, bot=Conversation.bot, contact_id=Contact.id))).one_or_none() or (None, None, None)
    if sender and found is None and conversation is not None:
        # Its row may be gone (retention, a deletion request): still this sender, never the first writer.
        return conversation, Contact(channel=inbound.channel, external_id=sender, display_name=""), None
    return conversation, found, stopped
