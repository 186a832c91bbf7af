"""Delivery receipts on both databases: applied to their part, parked when they race ahead of the
outbox's record, adopted afterwards, and never moved backwards."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import select, update

from gateway.delivery.receipts import EARLY_RECEIPT_TTL, adopt_early_receipts, purge_early_receipts, record_receipt
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender, utcnow
from storage.models import Delivery, EarlyReceipt, Message, OptOut


async def _reply_with_parts(sessions, provider_ids: list[str]) -> int:
    """A stored conversation with one sent reply of `provider_ids` parts; returns the reply's id."""
    inbound = await Inbox(sessions).accept("acme", InboundMessage(
        channel="whatsapp", external_id="SM-in", conversation=ConversationRef(channel="whatsapp", chat="whatsapp:+1"),
        sender=Sender(external_id="+1"), text="hi"))
    async with sessions() as session, session.begin():
        reply = Message(conversation_id=inbound.conversation_id, bot="acme", channel="whatsapp", direction="out",
                        author="bot", text="hello", status="sent")
        session.add(reply)
        await session.flush()
        session.add_all(Delivery(message_id=reply.id, channel="whatsapp", provider_id=p) for p in provider_ids)
        return reply.id


async def _parked(sessions) -> list[tuple[str, str]]:
    async with sessions() as session:
        return [(r.provider_id, r.status) for r in (await session.execute(select(EarlyReceipt))).scalars()]


async def _status(sessions, message_id: int) -> str:
    async with sessions() as session:
        return (await session.get(Message, message_id)).status


async def test_receipt_before_the_send_is_parked_then_adopted(sessions):
    # Two receipts race ahead of the record, concurrently and out of order: one parked row, the higher status.
    await asyncio.gather(
        record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-2", status="delivered", error_code=None),
        record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-2", status="sent", error_code=None),
    )
    assert await _parked(sessions) == [("SM-2", "delivered")]
    reply_id = await _reply_with_parts(sessions, ["SM-1", "SM-2"])
    await adopt_early_receipts(sessions, bot="acme", channel="whatsapp", provider_ids=["SM-1", "SM-2"])
    assert await _parked(sessions) == []
    assert await _status(sessions, reply_id) == "sent"  # SM-1 has no receipt yet: the reply is as far as its least part
    await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-1", status="read", error_code=None)
    assert await _status(sessions, reply_id) == "delivered"


async def test_unadopted_receipts_are_purged_after_their_ttl(sessions):
    for sid in ("SM-old", "SM-new"):
        await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id=sid, status="failed", error_code="30008")
    async with sessions() as session, session.begin():
        await session.execute(update(EarlyReceipt).where(EarlyReceipt.provider_id == "SM-old")
                              .values(received_at=utcnow() - EARLY_RECEIPT_TTL - timedelta(minutes=1)))
    async with sessions() as session, session.begin():
        assert await purge_early_receipts(session) == 1
    assert await _parked(sessions) == [("SM-new", "failed")]


async def test_a_receipt_on_another_bots_webhook_does_not_touch_this_bots_reply(sessions):
    """Twilio sends a reply's receipts to the webhook of the bot that sent it (its status_callback). One
    that came in on another bot's route, signed with that bot's auth token, named this bot's message and
    marked it failed (with 63016, sent it again as a template)."""
    reply_id = await _reply_with_parts(sessions, ["SM-acme"])
    await record_receipt(sessions, bot="beta", channel="whatsapp", provider_id="SM-acme", status="failed",
                         error_code="63016")
    assert await _status(sessions, reply_id) == "sent"
    await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-acme", status="delivered",
                         error_code=None)
    assert await _status(sessions, reply_id) == "delivered"


async def test_a_21610_receipt_opts_the_contact_out_unless_they_wrote_since_the_reply(sessions):
    """Twilio's 21610 (unsubscribed) in a receipt marks the contact opted out, on both databases; a receipt for
    a reply sent before the customer's last message (a START since) is older news and changes nothing."""
    reply_id = await _reply_with_parts(sessions, ["SM-old", "SM-new"])
    async with sessions() as session, session.begin():  # sent, then the customer wrote (their START)
        await session.execute(update(Message).where(Message.id == reply_id)
                              .values(sent_at=utcnow() - timedelta(minutes=5)))
    await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-old", status="failed",
                         error_code="21610")
    async with sessions() as session:
        assert (await session.execute(select(OptOut))).scalars().all() == []
    async with sessions() as session, session.begin():  # sent after the customer's last message
        await session.execute(update(Message).where(Message.id == reply_id).values(sent_at=utcnow()))
        await session.execute(update(Delivery).where(Delivery.provider_id == "SM-new").values(status="sent"))
    await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-new", status="failed",
                         error_code="21610")
    async with sessions() as session:
        [stop] = (await session.execute(select(OptOut))).scalars().all()
    assert stop.bot == "acme"


async def test_a_21610_receipt_opts_out_of_its_bot_though_the_customer_wrote_to_another_since(sessions):
    """A STOP is said to one business number (one bot): what the customer wrote to another bot since the reply
    is no START to this one, so the 21610 still opts them out of the bot that sent it."""
    reply_id = await _reply_with_parts(sessions, ["SM-acme"])
    async with sessions() as session, session.begin():  # sent after the customer's message to acme
        await session.execute(update(Message).where(Message.id == reply_id).values(sent_at=utcnow()))
    await Inbox(sessions).accept("beta", InboundMessage(
        channel="whatsapp", external_id="SM-to-beta", sender=Sender(external_id="+1"), text="hello beta",
        conversation=ConversationRef(channel="whatsapp", workspace="whatsapp:+2", chat="whatsapp:+1")))
    await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-acme", status="failed",
                         error_code="21610")
    async with sessions() as session:
        assert [s.bot for s in (await session.execute(select(OptOut))).scalars()] == ["acme"]
