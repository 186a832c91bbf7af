"""Delivery receipts (Twilio status callbacks): recorded on the reply part they name, then on the reply.

A receipt can arrive before the outbox has recorded the send it names (Twilio answers the send,
then calls back at once, while the outbox is still writing). Such a receipt is parked in
`early_receipts` and adopted when the outbox records the part. Each side commits its own row
first and then looks for the other's, so whichever commits second always finds the first.

WhatsApp's "outside the 24-hour window" (Twilio error 63016) mostly arrives here, in a failed receipt,
rather than as an error of the send: Twilio accepts the message and WhatsApp refuses it later. The reply
is then queued again with `meta.window_closed`, and the outbox sends the configured Content template in
its place (or fails it as undeliverable, saying so), once. A receipt failed with 21610 (the customer
opted out, with a STOP that never reached the gateway) marks the contact opted out of the bot that sent it, as
the STOP would have.
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from sqlalchemy import delete, exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import utcnow
from storage.models import Contact, Conversation, Delivery, EarlyReceipt, Message
from storage.opt_outs import opt_out

log = structlog.get_logger("gateway.receipts")

# Receipts can arrive out of order (a late "sent" after "delivered"): a status only ever moves up.
WINDOW_CLOSED_CODE = "63016"
"""Twilio's "outside the allowed window" error code."""
OPTED_OUT_CODE = "21610"
"""Twilio's "unsubscribed recipient": the customer opted out (a STOP we never saw), as a send's error or a receipt's."""
STATUS_RANK = {"pending": 0, "sending": 0, "sent": 1, "delivered": 2, "read": 3, "failed": 3}
EARLY_RECEIPT_TTL = timedelta(days=2)
"""A parked receipt nobody adopts (its send was never recorded) is dropped by the retention job after this."""


def overall(statuses: list[str]) -> str:
    """A split reply's status: failed if any part failed, else its least advanced part."""
    if "failed" in statuses:
        return "failed"
    return min(statuses, key=lambda s: STATUS_RANK.get(s, 0))


async def record_receipt(sessions: async_sessionmaker[AsyncSession], *, bot: str, channel: str, provider_id: str,
                         status: str, error_code: str | None) -> None:
    """Apply a receipt to the part it names, or park it until the outbox records that part."""
    if await _apply(sessions, bot=bot, channel=channel, provider_id=provider_id, status=status, error_code=error_code):
        return
    await _park(sessions, channel=channel, provider_id=provider_id, status=status, error_code=error_code)
    log.info("outbound.status_early", bot=bot, provider_message_id=provider_id, status=status)
    await adopt_early_receipts(sessions, bot=bot, channel=channel, provider_ids=[provider_id])


async def adopt_early_receipts(sessions: async_sessionmaker[AsyncSession], *, bot: str, channel: str,
                               provider_ids: list[str]) -> None:
    """Apply and drop the parked receipts of parts that are now recorded (called once both are committed)."""
    async with sessions() as session:
        parked = (await session.execute(select(EarlyReceipt).where(
            EarlyReceipt.channel == channel, EarlyReceipt.provider_id.in_(provider_ids)))).scalars().all()
    for receipt in parked:
        await _apply(sessions, bot=bot, channel=channel, provider_id=receipt.provider_id, status=receipt.status,
                     error_code=receipt.error_code, parked_id=receipt.id)


async def purge_early_receipts(session: AsyncSession) -> int:
    """Drop parked receipts older than `EARLY_RECEIPT_TTL`; returns how many."""
    result = await session.execute(delete(EarlyReceipt).where(EarlyReceipt.received_at < utcnow() - EARLY_RECEIPT_TTL))
    return result.rowcount or 0


async def _apply(sessions: async_sessionmaker[AsyncSession], *, bot: str, channel: str, provider_id: str, status: str,
                 error_code: str | None, parked_id: int | None = None) -> bool:
    """Record the receipt on its part and the reply; False when no part carries `provider_id` yet.
    `parked_id`: the parked receipt it came from, dropped in the same transaction (apart, a reader
    could see the reply delivered and its receipt still parked)."""
    opting_out = status == "failed" and error_code == OPTED_OUT_CODE and channel == "whatsapp"
    async with sessions() as session, session.begin():
        # The bot's own parts only: a receipt comes to the webhook of the bot that sent the part (its status
        # callback), and one on another bot's route, signed with that bot's token, must not touch this one's.
        ours = (Delivery.channel == channel, Delivery.provider_id == provider_id, Message.bot == bot)
        found = (select(Delivery.message_id, Conversation.contact_id).join(Message, Message.id == Delivery.message_id)
                 .join(Conversation, Conversation.id == Message.conversation_id)
                 .where(*ours).order_by(Delivery.id.desc()).limit(1))
        # Locked in `gateway forget`'s order (the contact, then the reply, then its parts, which its delete
        # cascades to): the part first, a receipt and a forget of its contact each held a row the other
        # waited for, "deadlock detected" on PostgreSQL. The reply is locked as it is found (a round trip
        # less on every receipt), but for one that may mark its contact opted out: the contact comes first.
        named = (await session.execute(found if opting_out else found.with_for_update(of=Message, key_share=True))).first()
        if named is None:
            return False
        if opting_out:
            if named.contact_id is not None:
                await session.execute(select(Contact.id).where(Contact.id == named.contact_id).with_for_update())
            await session.execute(select(Message.id).where(Message.id == named.message_id)
                                  .with_for_update(key_share=True))
        delivery = (await session.execute(select(Delivery).join(Message, Message.id == Delivery.message_id)
                                          .where(*ours, Delivery.message_id == named.message_id)
                                          .order_by(Delivery.id.desc()).limit(1)
                                          .with_for_update(of=Delivery))).scalars().first()
        if delivery is None:  # erased meanwhile (`gateway forget`), or queued again for the template
            return False
        if parked_id is not None:
            await session.execute(delete(EarlyReceipt).where(EarlyReceipt.id == parked_id))
        if STATUS_RANK.get(status, 0) <= STATUS_RANK.get(delivery.status, 0):
            log.info("outbound.status_stale", bot=bot, message_id=delivery.message_id, status=status,
                     current=delivery.status)
            return True
        delivery.status = status
        delivery.error_code = error_code
        await session.flush()
        parts = (await session.execute(select(Delivery.status).where(
            Delivery.message_id == delivery.message_id))).scalars().all()
        values = {"status": overall(list(parts)), "updated_at": utcnow()}
        if error_code:
            values["error"] = f"provider error {error_code}"
        await session.execute(update(Message).where(Message.id == delivery.message_id).values(**values))
        requeued = status == "failed" and error_code == WINDOW_CLOSED_CODE and channel == "whatsapp" \
            and await _requeue_for_template(session, delivery.message_id)
        opted_out = opting_out and await _mark_opted_out(session, delivery.message_id)
    log.info("outbound.status", bot=bot, message_id=delivery.message_id, status=status, error_code=error_code)
    if opted_out:
        log.warning("outbound.recipient_opted_out", bot=bot, message_id=delivery.message_id,
                    action="nothing more is sent to them until they write START")
    if requeued:
        log.warning("outbound.window_closed_requeued", bot=bot, message_id=delivery.message_id,
                    action="the template goes out in its place")
    return True


async def _requeue_for_template(session: AsyncSession, message_id: int) -> bool:
    """Queue a reply WhatsApp refused as outside the window again, marked for the template; once.

    Its parts' rows go (their ids stay in `meta.window_closed`), so the template's own receipts decide
    the reply's status rather than the refused part's `failed`."""
    message = await session.get(Message, message_id, with_for_update=True)
    meta = dict(message.meta or {}) if message is not None else {}
    if message is None or message.direction != "out" or meta.get("template") or meta.get("window_closed"):
        return False
    meta["window_closed"] = list(message.provider_ids or [])
    meta.pop("next_attempt_at", None)
    await session.execute(delete(Delivery).where(Delivery.message_id == message_id))
    await session.execute(update(Message).where(Message.id == message_id).values(
        status="pending", meta=meta, error=f"provider error {WINDOW_CLOSED_CODE}: outside the 24-hour window",
        updated_at=utcnow()).execution_options(synchronize_session=False))
    return True


async def _mark_opted_out(session: AsyncSession, message_id: int) -> bool:
    """Mark the contact of the reply Twilio refused with 21610 opted out of its bot, as a STOP to it does (the
    outbox does the same for a send refused at once): else every later reply goes to Twilio and is refused one by one.

    Not when the customer wrote to that bot after the reply was sent: a receipt can come minutes late, and a START
    (or any message of theirs) since then is newer than what it says. What they wrote to another bot is not: a
    STOP is said to one business number."""
    # The contact locked, then asked: a START being stored (storing a message updates the contact's row) is waited
    # for, and read by the next statement once it commits. Asked in this statement, it would not be seen.
    reply = (await session.execute(select(Message.sent_at, Message.bot, Message.conversation_id, Conversation.contact_id)
                                   .join(Conversation, Conversation.id == Message.conversation_id)
                                   .join(Contact, Contact.id == Conversation.contact_id)
                                   .where(Message.id == message_id).with_for_update(of=Contact))).one_or_none()
    if reply is None:  # no such reply, or its conversation has no contact
        return False
    wrote = [Message.conversation_id == reply.conversation_id, Message.direction == "in"]
    if reply.sent_at is not None:
        wrote.append(Message.created_at > reply.sent_at)
    if (await session.execute(select(exists().where(*wrote)))).scalar_one():
        return False
    return await opt_out(session, bot=reply.bot, contact_id=reply.contact_id, at=utcnow())


async def _park(sessions: async_sessionmaker[AsyncSession], *, channel: str, provider_id: str, status: str,
                error_code: str | None) -> None:
    """Store (or advance) the parked receipt for `provider_id`."""
    for _ in range(2):  # a concurrent first receipt for the same part wins the insert; then advance it
        try:
            async with sessions() as session, session.begin():
                parked = (await session.execute(select(EarlyReceipt).where(
                    EarlyReceipt.channel == channel, EarlyReceipt.provider_id == provider_id)
                    .with_for_update())).scalar_one_or_none()
                if parked is None:
                    session.add(EarlyReceipt(channel=channel, provider_id=provider_id, status=status,
                                             error_code=error_code))
                elif STATUS_RANK.get(status, 0) > STATUS_RANK.get(parked.status, 0):
                    parked.status, parked.error_code = status, error_code
            return
        except IntegrityError:
            continue
