"""A split reply whose later part failed, then a restart during the retry wait: part 1 is not sent again.

A reply longer than one platform message goes out in parts. Part 1 lands, part 2 is refused with a
rate limit longer than the adapter waits in place, so the outbox schedules a retry. The process is
killed during that wait. The next attempt runs in a new process: a new adapter (its in-memory
progress empty) and a new Outbox over the same database rows. It must resume after part 1: the
customer gets each part once, and the stored reply names both parts, so part 1's delivery receipt
(WhatsApp), which came in during the wait, is matched to it.

Real adapters against the local fakes (Twilio, Telegram Bot API, Discord REST); the clock is moved
past the retry time by rewriting `next_attempt_at`, as the wait would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from structlog.testing import capture_logs

from channels.base import ChannelAdapter
from channels.discord import DiscordAdapter
from channels.discord_render import render_message
from channels.render import split_text
from channels.telegram import TelegramAdapter
from channels.whatsapp import MAX_LENGTH as WHATSAPP_LIMIT
from channels.whatsapp import WhatsAppAdapter
from channels.whatsapp_render import to_whatsapp
from gateway.delivery.outbox import Outbox, next_attempt_at
from gateway.delivery.receipts import record_receipt
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, OutboundMessage, Sender, utcnow
from gateway.settings import DiscordChannel, TelegramChannel, WhatsAppChannel
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Delivery, EarlyReceipt, Message
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.twilio_api import FakeTwilio, Reply

BOT = "acme"
WA_SID = "AC" + "0123456789abcdef" * 2
WA_TOKEN = "twilio-auth-token-for-tests"
WA_CUSTOMER = "whatsapp:+491511234567"
TG_TOKEN = "723738643:AAH-fake-token_for-tests"
TG_CHAT = "367699112"
DISCORD_CHANNEL = "900000000000000001"
DISCORD_GUILD = "900000000000000002"


def _two_parts(size: int) -> str:
    """A reply that splits into exactly two platform messages of about `size` characters each."""
    return "\n\n".join(f"Part {n}. " + "Check the plan settings. " * (size // 25) for n in ("one", "two"))


@asynccontextmanager
async def process(url: str, channel: str, adapter: ChannelAdapter) -> AsyncIterator[tuple[Outbox, object]]:
    """One gateway process: its own engine, sessions and Outbox, and `adapter` with fresh memory.

    Leaving it is the process ending: the adapter is stopped, the engine disposed, nothing carried over."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    try:
        yield Outbox(sessions, adapters={(BOT, channel): adapter}, bus=EventBus()), sessions
    finally:
        await adapter.stop()
        await engine.dispose()


async def _stored_reply(sessions, inbound: InboundMessage, text: str) -> int:
    """The customer's question and the bot's long reply to it, stored as the worker stores them."""
    accepted = await Inbox(sessions).accept(BOT, inbound)
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, accepted.conversation_id)
        reply = await repo.add_outbound(session, conversation=conversation, text=text,
                                        reply_to_id=accepted.message_id)
        return reply.id


async def _reply(sessions, reply_id: int) -> Message:
    async with sessions() as session:
        return await session.get(Message, reply_id)


async def _retry_wait_passes(sessions, reply_id: int) -> None:
    """What the wait does to the row: its retry time comes. Everything else stays as stored."""
    message = await _reply(sessions, reply_id)
    meta = {**message.meta, "next_attempt_at": (utcnow() - timedelta(seconds=1)).isoformat()}
    async with sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == reply_id).values(meta=meta))


async def _interrupted_then_resumed(url: str, channel: str, *, inbound: InboundMessage, text: str,
                                    adapter: Callable[[], ChannelAdapter], refuse_part_two: Callable[[], None],
                                    during_wait: Callable[[object, Message], Awaitable[None]] | None = None,
                                    ) -> tuple[Message, Message]:
    """Attempt 1 in one process (part 2 refused, retry scheduled), attempt 2 in the next.

    Returns the stored reply after each attempt."""
    async with process(url, channel, adapter()) as (outbox, sessions):
        reply_id = await _stored_reply(sessions, inbound, text)
        refuse_part_two()
        assert await outbox.deliver(reply_id) == "retry"
        first = await _reply(sessions, reply_id)
        assert first.status == "pending" and next_attempt_at(first) > utcnow() + timedelta(seconds=30)
        if during_wait is not None:
            await during_wait(sessions, first)
    # Killed during the wait. The next process knows only what the database holds.
    async with process(url, channel, adapter()) as (outbox, sessions):
        assert await outbox.deliver(reply_id) == "deferred"  # the platform's wait is not over yet
        await _retry_wait_passes(sessions, reply_id)
        assert await outbox.deliver(reply_id) == "sent"
        return first, await _reply(sessions, reply_id)


async def _deliveries(url: str, reply_id: int) -> list[Delivery]:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            return list((await session.execute(select(Delivery).where(Delivery.message_id == reply_id)
                                               .order_by(Delivery.id))).scalars().all())
    finally:
        await engine.dispose()


async def _early_receipts(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            return list((await session.execute(select(EarlyReceipt.provider_id))).scalars().all())
    finally:
        await engine.dispose()


# -- WhatsApp -----------------------------------------------------------------------------------


@pytest.fixture
def twilio():
    fake = FakeTwilio(account_sid=WA_SID, auth_token=WA_TOKEN).start()
    yield fake
    fake.stop()


def _whatsapp(twilio: FakeTwilio) -> Callable[[], WhatsAppAdapter]:
    settings = WhatsAppChannel(account_sid=WA_SID, auth_token=WA_TOKEN, from_number="+15550001111",
                               public_url="https://gw.example.com", api_base=twilio.base_url)
    return lambda: WhatsAppAdapter(BOT, settings, backoff=0.01)


def _whatsapp_question(sid: str) -> InboundMessage:
    return InboundMessage(channel="whatsapp", external_id=sid, sender=Sender("491511234567"), text="Plans?",
                          conversation=ConversationRef(channel="whatsapp", workspace="whatsapp:+15550001111",
                                                       chat=WA_CUSTOMER))


async def test_whatsapp_part_one_is_not_resent_after_a_restart_and_its_receipt_is_matched(migrated_url, twilio):
    text = _two_parts(1200)
    parts = split_text(to_whatsapp(text), limit=WHATSAPP_LIMIT, unit="utf16")
    assert len(parts) == 2

    def refuse_part_two() -> None:  # Twilio takes part 1, then asks to wait a minute
        twilio.script(Reply(sid="SM" + "1" * 32),
                      Reply(status=429, code=20429, message="Too Many Requests", retry_after=60))

    async def receipt_for_part_one(sessions, reply: Message) -> None:
        # Twilio's status callback for part 1 comes during the wait: no recorded part carries its SID yet.
        await record_receipt(sessions, bot=BOT, channel="whatsapp", provider_id="SM" + "1" * 32,
                             status="delivered", error_code=None)

    first, final = await _interrupted_then_resumed(
        migrated_url, "whatsapp", inbound=_whatsapp_question("SM" + "a" * 32), text=text,
        adapter=_whatsapp(twilio), refuse_part_two=refuse_part_two, during_wait=receipt_for_part_one)

    assert [r.form["Body"] for r in twilio.delivered] == parts  # each part once, in order
    sid_one, sid_two = (r.sid for r in twilio.delivered)
    assert sid_one == "SM" + "1" * 32
    assert first.provider_ids == []  # nothing is recorded as sent while the reply waits
    assert final.status == "sent" and final.provider_ids == [sid_one, sid_two] and final.attempts == 2
    assert "delivered_parts" not in (final.meta or {})
    assert [(d.provider_id, d.status) for d in await _deliveries(migrated_url, final.id)] == [
        (sid_one, "delivered"), (sid_two, "sent")]
    assert await _early_receipts(migrated_url) == []  # part 1's receipt was adopted, not left parked


async def test_whatsapp_reply_failing_for_good_after_a_restart_still_names_part_one(migrated_url, twilio):
    text = _two_parts(1200)

    def refuse_part_two() -> None:
        twilio.script(Reply(), Reply(status=429, code=20429, message="Too Many Requests", retry_after=60))

    async with process(migrated_url, "whatsapp", _whatsapp(twilio)()) as (outbox, sessions):
        reply_id = await _stored_reply(sessions, _whatsapp_question("SM" + "b" * 32), text)
        refuse_part_two()
        assert await outbox.deliver(reply_id) == "retry"
    async with process(migrated_url, "whatsapp", _whatsapp(twilio)()) as (outbox, sessions):
        await _retry_wait_passes(sessions, reply_id)
        twilio.script(Reply(status=400, code=21408, message="Permission to send an SMS has not been enabled"))
        assert await outbox.deliver(reply_id) == "failed"
        final = await _reply(sessions, reply_id)
    sid_one = twilio.delivered[0].sid
    assert len(twilio.delivered) == 1 and [r.status for r in twilio.requests] == [201, 429, 400]
    assert final.provider_ids == [sid_one] and "delivered_parts" not in (final.meta or {})


async def test_whatsapp_replica_with_older_memory_resumes_from_the_stored_parts(migrated_url, twilio):
    # Two replicas take turns at one three-part reply: A sends part 1, B (which A's memory never hears
    # of) sends part 2, then A again. A remembers only part 1; the stored record is newer and wins.
    text = "\n\n".join(f"Part {n}. " + "Check the plan settings. " * 48 for n in ("one", "two", "three"))
    parts = split_text(to_whatsapp(text), limit=WHATSAPP_LIMIT, unit="utf16")
    assert len(parts) == 3
    rate_limited = Reply(status=429, code=20429, message="Too Many Requests", retry_after=60)
    async with process(migrated_url, "whatsapp", _whatsapp(twilio)()) as (replica_a, sessions):
        reply_id = await _stored_reply(sessions, _whatsapp_question("SM" + "c" * 32), text)
        twilio.script(Reply(), rate_limited)
        assert await replica_a.deliver(reply_id) == "retry"
        async with process(migrated_url, "whatsapp", _whatsapp(twilio)()) as (replica_b, _):
            await _retry_wait_passes(sessions, reply_id)
            twilio.script(Reply(), rate_limited)
            assert await replica_b.deliver(reply_id) == "retry"
        await _retry_wait_passes(sessions, reply_id)
        assert await replica_a.deliver(reply_id) == "sent"
        final = await _reply(sessions, reply_id)
    assert [r.form["Body"] for r in twilio.delivered] == parts  # each part once, in order
    assert final.provider_ids == [r.sid for r in twilio.delivered]


# -- Telegram -----------------------------------------------------------------------------------


@asynccontextmanager
async def _telegram(update_id: str, message_id: int) -> AsyncIterator[
        tuple[FakeTelegramAPI, Callable[[], TelegramAdapter], InboundMessage]]:
    """A fake Telegram, an adapter factory for it, and a customer's question (`message_id` in the chat)."""
    async with FakeTelegramAPI(TG_TOKEN) as telegram:
        settings = TelegramChannel(token=TG_TOKEN, webhook_secret="s3cret-Token_value", api_base=telegram.base_url)
        question = InboundMessage(channel="telegram", external_id=update_id, sender=Sender(TG_CHAT), text="Plans?",
                                  conversation=ConversationRef(channel="telegram", chat=TG_CHAT),
                                  raw={"message_id": message_id})
        yield telegram, (lambda: TelegramAdapter(BOT, settings, username="support_bot")), question


async def test_telegram_part_one_is_not_resent_after_a_restart(migrated_url):
    text = _two_parts(3000)
    async with _telegram("700001", 42) as (telegram, adapter, question):
        with capture_logs() as logs:
            first, final = await _interrupted_then_resumed(
                migrated_url, "telegram", inbound=question, text=text, adapter=adapter,
                refuse_part_two=lambda: telegram.fail_next("sendMessage", status=429, retry_after=60, skip=1))
        sent = [m for m in telegram.sent if str(m.chat_id) == TG_CHAT]
    # Each send's log line names the customer's message it answers: grepping that id follows the reply.
    sends = [e for e in logs if e["event"] in ("outbound.retry_scheduled", "outbound.sent")]
    assert [e["event"] for e in sends] == ["outbound.retry_scheduled", "outbound.sent"]
    assert {e["reply_to"] for e in sends} == {final.reply_to_id} and final.reply_to_id is not None
    assert {e["message_id"] for e in sends} == {final.id}
    assert [m.text.split(".")[0] for m in sent] == ["Part one", "Part two"]  # each part once, in order
    assert sent[0].reply_to == 42 and sent[1].reply_to is None
    assert first.provider_ids == []
    assert final.status == "sent" and final.provider_ids == [str(m.message_id) for m in sent]
    assert "delivered_parts" not in (final.meta or {})
    assert [d.provider_id for d in await _deliveries(migrated_url, final.id)] == final.provider_ids


# -- Discord ------------------------------------------------------------------------------------


def _rate_limit_after_one(fake: FakeDiscord, *, retry_after: float) -> None:
    """Discord takes chunk 1, then answers chunk 2 with a 429 longer than discord.py waits in place."""
    fake.fail_next("POST", f"/channels/{DISCORD_CHANNEL}/messages", status=429, after=1,
                   body={"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
                   headers={"Retry-After": str(retry_after), "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
                            "X-RateLimit-Reset-After": str(retry_after), "X-RateLimit-Bucket": "fakebucket",
                            "X-RateLimit-Scope": "user", "Via": "1.1 google"})


@asynccontextmanager
async def _discord(external_id: str) -> AsyncIterator[tuple[FakeDiscord, Callable[[], DiscordAdapter], InboundMessage]]:
    """A fake Discord whose nonces expire at once (the retry comes after Discord stopped checking them),
    an adapter factory for it, and a customer's question in its channel."""
    conversation = ConversationRef(channel="discord", workspace=DISCORD_GUILD, chat=DISCORD_CHANNEL)
    discord_api = await FakeDiscord().start()
    try:
        discord_api.nonce_ttl = 0
        settings = DiscordChannel(token="fake-bot-token", api_base=discord_api.api_base,
                                  gateway_url=discord_api.gateway_url)
        question = InboundMessage(channel="discord", external_id=external_id, sender=Sender("9003"),
                                  text="Plans?", conversation=conversation)
        yield discord_api, (lambda: DiscordAdapter(BOT, settings)), question
    finally:
        await discord_api.close()


async def test_discord_part_one_is_not_resent_after_a_restart(migrated_url):
    text = _two_parts(1500)
    conversation = ConversationRef(channel="discord", workspace=DISCORD_GUILD, chat=DISCORD_CHANNEL)
    assert len(render_message(OutboundMessage(conversation=conversation, text=text))) == 2
    async with _discord("900000000000000010") as (discord_api, adapter, question):
        first, final = await _interrupted_then_resumed(
            migrated_url, "discord", inbound=question, text=text, adapter=adapter,
            refuse_part_two=lambda: _rate_limit_after_one(discord_api, retry_after=120.0))
        posted = discord_api.channel_messages(DISCORD_CHANNEL)
    assert [m["content"][:8] for m in posted] == ["Part one", "Part two"]  # each part once, in order
    assert first.provider_ids == []
    assert final.status == "sent" and final.provider_ids == [m["id"] for m in posted]
    assert "delivered_parts" not in (final.meta or {})


# -- Killed between two parts ---------------------------------------------------------------------


async def _killed_between_parts_then_resumed(url: str, channel: str, *, inbound: InboundMessage, text: str,
                                             adapter: Callable[[], ChannelAdapter], part_one_landed: Callable[[], bool],
                                             ) -> Message:
    """Attempt 1 is killed after part 1 landed, while part 2 waits out a short rate limit in place: nothing
    after that runs, so the row stays `sending`. The next process requeues it, as it does a dead replica's
    send, and sends it again. Returns the stored reply."""
    async with process(url, channel, adapter()) as (outbox, sessions):
        reply_id = await _stored_reply(sessions, inbound, text)
        attempt = asyncio.create_task(outbox.deliver(reply_id))
        while not part_one_landed():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # inside the adapter's in-place wait before part 2
        attempt.cancel()  # SIGKILL: no handler runs, nothing more is written
        with contextlib.suppress(asyncio.CancelledError):
            await attempt
    async with process(url, channel, adapter()) as (outbox, sessions):
        async with sessions() as session, session.begin():
            assert await repo.requeue_stalled_send(session, message_id=reply_id, now=utcnow(),
                                                   older_than=timedelta(0))
        assert await outbox.deliver(reply_id) == "sent"
        return await _reply(sessions, reply_id)


async def test_telegram_part_one_is_not_resent_after_a_kill_between_parts(migrated_url):
    # Part 1 was sent again: only a failed attempt stored the parts that had landed, and a kill is none.
    async with _telegram("700002", 43) as (telegram, adapter, question):
        telegram.fail_next("sendMessage", status=429, retry_after=3, skip=1)  # waited out in place
        final = await _killed_between_parts_then_resumed(
            migrated_url, "telegram", inbound=question, text=_two_parts(3000), adapter=adapter,
            part_one_landed=lambda: any(str(m.chat_id) == TG_CHAT for m in telegram.sent))
        sent = [m for m in telegram.sent if str(m.chat_id) == TG_CHAT]
    assert [m.text.split(".")[0] for m in sent] == ["Part one", "Part two"]  # each part once, in order
    assert final.provider_ids == [str(m.message_id) for m in sent] and "delivered_parts" not in (final.meta or {})


async def test_whatsapp_part_one_is_not_resent_after_a_kill_between_parts(migrated_url, twilio):
    text = _two_parts(1200)
    parts = split_text(to_whatsapp(text), limit=WHATSAPP_LIMIT, unit="utf16")
    twilio.script(Reply(), Reply(status=429, code=20429, message="Too Many Requests", retry_after=3))
    final = await _killed_between_parts_then_resumed(
        migrated_url, "whatsapp", inbound=_whatsapp_question("SM" + "d" * 32), text=text,
        adapter=_whatsapp(twilio), part_one_landed=lambda: len(twilio.delivered) == 1)
    assert [r.form["Body"] for r in twilio.delivered] == parts  # each part once, in order
    assert final.provider_ids == [r.sid for r in twilio.delivered]


async def test_discord_part_one_is_not_resent_after_a_kill_between_parts(migrated_url):
    async with _discord("900000000000000011") as (discord_api, adapter, question):
        _rate_limit_after_one(discord_api, retry_after=3.0)  # waited out in place by discord.py
        final = await _killed_between_parts_then_resumed(
            migrated_url, "discord", inbound=question, text=_two_parts(1500), adapter=adapter,
            part_one_landed=lambda: len(discord_api.channel_messages(DISCORD_CHANNEL)) == 1)
        posted = discord_api.channel_messages(DISCORD_CHANNEL)
    assert [m["content"][:8] for m in posted] == ["Part one", "Part two"]  # each part once, in order
    assert final.provider_ids == [m["id"] for m in posted] and "delivered_parts" not in (final.meta or {})
