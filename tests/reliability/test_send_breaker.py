"""A channel whose platform is down is paused (gateway/delivery/send_breaker.py): its replies are rescheduled
without an attempt, and other channels' replies go out at once."""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from channels.telegram import TelegramAdapter
from gateway.delivery.outbox import Outbox, next_attempt_at
from gateway.delivery.send_breaker import FAILURES_TO_PAUSE, FIRST_PAUSE_S, MAX_PAUSE_S, PROBE_WAIT_S, SendBreaker
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender, utcnow
from gateway.settings import TelegramChannel
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.scale.replicas import free_port

TOKEN = "723738643:AAH-fake-token_for-tests"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_failures_in_a_row_pause_a_channel_and_each_pause_in_a_row_doubles() -> None:
    clock = Clock()
    breaker = SendBreaker(clock=clock)
    for _ in range(FAILURES_TO_PAUSE - 1):
        breaker.failed("acme", "telegram", error="unreachable")
    assert breaker.paused_until("acme", "telegram") is None
    breaker.failed("acme", "telegram", error="unreachable")
    until = breaker.paused_until("acme", "telegram")
    assert until is not None and timedelta(seconds=FIRST_PAUSE_S - 1) < until - utcnow() <= timedelta(
        seconds=FIRST_PAUSE_S)
    assert breaker.paused_until("acme", "slack") is None and breaker.paused_until("beta", "telegram") is None
    breaker.failed("acme", "telegram", error="in flight when it paused")  # does not lengthen the pause
    clock.now += FIRST_PAUSE_S
    assert breaker.paused_until("acme", "telegram") is None  # tried again after the pause
    breaker.failed("acme", "telegram", error="still down")
    assert breaker.paused_until("acme", "telegram") - utcnow() > timedelta(seconds=FIRST_PAUSE_S)  # 10 s now
    for _ in range(10):
        clock.now += MAX_PAUSE_S
        breaker.failed("acme", "telegram", error="still down")
    assert breaker.paused_until("acme", "telegram") - utcnow() <= timedelta(seconds=MAX_PAUSE_S)
    breaker.reached("acme", "telegram")
    assert breaker.paused_until("acme", "telegram") is None
    breaker.failed("acme", "telegram", error="one failure after a success")
    assert breaker.paused_until("acme", "telegram") is None


async def _reply(sessions, bot: str, chat: str, n: int) -> int:
    inbound = InboundMessage(channel="telegram", external_id=f"{bot}-{chat}-{n}", sender=Sender(chat), text="Plans?",
                             conversation=ConversationRef(channel="telegram", chat=chat))
    accepted = await Inbox(sessions).accept(bot, inbound)
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, accepted.conversation_id)
        return (await repo.add_outbound(session, conversation=conversation, text="Plus costs $6.",
                                        reply_to_id=accepted.message_id)).id


async def test_a_platform_that_is_down_pauses_only_its_channel(migrated_url) -> None:
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    down = TelegramAdapter("acme", TelegramChannel(token=TOKEN, webhook_secret="s3cret",
                                                   api_base=f"http://127.0.0.1:{free_port()}"))
    try:
        async with FakeTelegramAPI(TOKEN) as telegram:
            up = TelegramAdapter("beta", TelegramChannel(token=TOKEN, webhook_secret="s3cret",
                                                         api_base=telegram.base_url))
            outbox = Outbox(sessions, adapters={("acme", "telegram"): down, ("beta", "telegram"): up},
                            bus=EventBus())
            downs = [await _reply(sessions, "acme", str(500 + n), n) for n in range(FAILURES_TO_PAUSE + 2)]
            assert [await outbox.deliver(i) for i in downs[:FAILURES_TO_PAUSE]] == ["retry"] * FAILURES_TO_PAUSE
            # Paused: the next ones are rescheduled for the pause's end, without an attempt.
            assert [await outbox.deliver(i) for i in downs[FAILURES_TO_PAUSE:]] == ["deferred", "deferred"]
            async with sessions() as session:
                held = [await session.get(Message, i) for i in downs[FAILURES_TO_PAUSE:]]
            assert all(m.attempts == 0 and m.status == "pending" for m in held)
            assert all(utcnow() < next_attempt_at(m) <= utcnow() + timedelta(seconds=FIRST_PAUSE_S) for m in held)
            # Another bot's Telegram is fine, and a rate limit there never pauses it.
            ups = [await _reply(sessions, "beta", str(700 + n), n) for n in range(FAILURES_TO_PAUSE + 1)]
            for reply_id in ups[:FAILURES_TO_PAUSE]:
                telegram.fail_next("sendMessage", status=429, retry_after=3600)
                assert await outbox.deliver(reply_id) == "retry"
            assert await outbox.deliver(ups[-1]) == "sent"
            await up.stop()
    finally:
        await down.stop()
        await engine.dispose()


def test_after_a_pause_one_send_probes_while_the_others_wait() -> None:
    """Every paused reply came due at once, and each worker slot waited out the platform again (review)."""
    clock = Clock()
    breaker = SendBreaker(clock=clock)
    for _ in range(FAILURES_TO_PAUSE):
        breaker.failed("acme", "slack", error="timeout")
    clock.now += FIRST_PAUSE_S
    assert breaker.paused_until("acme", "slack") is None  # the probe
    waits = [breaker.paused_until("acme", "slack") for _ in range(3)]
    assert all(w is not None and w - utcnow() <= timedelta(seconds=PROBE_WAIT_S) for w in waits)
    breaker.failed("acme", "slack", error="timeout")  # the probe failed: the next, longer pause
    assert breaker.paused_until("acme", "slack") - utcnow() > timedelta(seconds=FIRST_PAUSE_S)
    clock.now += MAX_PAUSE_S
    assert breaker.paused_until("acme", "slack") is None  # the next probe
    breaker.reached("acme", "slack")
    assert [breaker.paused_until("acme", "slack") for _ in range(3)] == [None, None, None]


async def test_a_reply_held_past_the_longest_wait_is_not_failed_by_its_first_rate_limit(migrated_url) -> None:
    # A reply that waited behind a paused channel or a parked conversation for over an hour met its first 429
    # and failed at once as 'still rate limited', since the wait was counted from when it was stored.
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        reply_id = await _reply(sessions, "acme", "900", 0)
        async with sessions() as session, session.begin():
            await session.execute(update(Message).where(Message.id == reply_id)
                                  .values(created_at=utcnow() - timedelta(hours=2)))
        telegram.fail_next("sendMessage", status=429, retry_after=120)
        assert await outbox.deliver(reply_id) == "retry"
        async with sessions() as session:
            reply = await session.get(Message, reply_id)
        assert reply.status == "pending" and "rate limited" in reply.error


async def test_a_rate_limit_after_other_failures_is_a_new_wait_not_the_old_one(migrated_url) -> None:
    # The longest wait is for one streak of rate limits: a reply limited two hours ago, then failing otherwise
    # (an outage), then limited again, was failed at its new 429 as 'still rate limited 7200s'.
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        reply_id = await _reply(sessions, "acme", "901", 0)
        telegram.fail_next("sendMessage", status=429, retry_after=120)
        assert await outbox.deliver(reply_id) == "retry"
        await _due_now(sessions, reply_id, rate_limited_since=(utcnow() - timedelta(hours=2)).isoformat())
        telegram.fail_next("sendMessage", status=502, html=True, times=40)  # an outage, past in-place retries
        assert await outbox.deliver(reply_id) == "retry"
        telegram._scripts["sendmessage"].clear()
        await _due_now(sessions, reply_id)
        telegram.fail_next("sendMessage", status=429, retry_after=120)
        assert await outbox.deliver(reply_id) == "retry"
        async with sessions() as session:
            reply = await session.get(Message, reply_id)
        assert reply.status == "pending" and reply.error.startswith("rate limited")


@asynccontextmanager
async def _telegram_outbox(database_url: str):
    """(sessions, fake Telegram, an outbox sending through the real Telegram adapter), waiting an hour at most."""
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        async with FakeTelegramAPI(TOKEN) as telegram:
            adapter = TelegramAdapter("acme", TelegramChannel(token=TOKEN, webhook_secret="s3cret",
                                                              api_base=telegram.base_url))
            try:
                yield sessions, telegram, Outbox(sessions, adapters={("acme", "telegram"): adapter}, bus=EventBus(),
                                                 max_wait_s=3600.0)
            finally:
                await adapter.stop()
    finally:
        await engine.dispose()


async def _due_now(sessions, reply_id: int, **meta) -> None:
    """The reply's retry is due now (its back-off skipped), with `meta` set on it."""
    async with sessions() as session, session.begin():
        reply = await session.get(Message, reply_id)
        reply.meta = {**{k: v for k, v in reply.meta.items() if k != "next_attempt_at"}, **meta}


async def test_the_wait_after_a_rate_limit_is_the_platforms_not_a_doubling_of_every_try(migrated_url) -> None:
    # The back-off doubled on every try, rate limits included: a reply told "retry after 20 s" for the ninth
    # time waited 300 s, and its first real failure after nine rate limits waited 300 s instead of 5.
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        reply_id = await _reply(sessions, "acme", "902", 0)
        for _ in range(9):
            await _due_now(sessions, reply_id)
            telegram.fail_next("sendMessage", status=429, retry_after=20)  # past the adapter's in-place wait
            assert await outbox.deliver(reply_id) == "retry"
        async with sessions() as session:
            reply = await session.get(Message, reply_id)
        assert next_attempt_at(reply) <= utcnow() + timedelta(seconds=20)
        await _due_now(sessions, reply_id)
        telegram.fail_next("sendMessage", status=502, html=True, times=40)  # an outage, past in-place retries
        assert await outbox.deliver(reply_id) == "retry"
        async with sessions() as session:
            reply = await session.get(Message, reply_id)
        assert reply.error.startswith("attempt 1/") and next_attempt_at(reply) <= utcnow() + timedelta(seconds=10)


async def _whatsapp_reply(sessions, phone: str, *, wrote_hours_ago: float) -> int:
    """A reply to `phone`'s WhatsApp question, the contact having last written `wrote_hours_ago` hours ago."""
    conversation_ref = ConversationRef(channel="whatsapp", workspace="whatsapp:+15550001111", chat=f"whatsapp:{phone}")
    inbound = InboundMessage(channel="whatsapp", external_id=f"SM-{phone}", sender=Sender(f"whatsapp:{phone}"),
                             text="Plans?", conversation=conversation_ref)
    accepted = await Inbox(sessions).accept("acme", inbound)
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, accepted.conversation_id)
        await session.execute(update(Message).where(Message.id == accepted.message_id)
                              .values(created_at=utcnow() - timedelta(hours=wrote_hours_ago)))
        return (await repo.add_outbound(session, conversation=conversation, text="Plus costs $6.",
                                        reply_to_id=accepted.message_id)).id


async def test_a_reply_outside_the_whatsapp_window_neither_ends_a_pause_nor_holds_its_probe(migrated_url) -> None:
    """A reply past the 24-hour window without a template is refused here (`OutsideWindow`), Twilio not asked.
    Tried as the probe after a pause, it said nothing of whether Twilio is back: the pause must stand, and the
    probe's slot must be given back at once, or every WhatsApp reply waited `PROBE_TIMEOUT_S` for a probe
    that had ended."""
    from channels.whatsapp import WhatsAppAdapter
    from tests.channels.test_whatsapp import ACCOUNT_SID, AUTH_TOKEN, _settings
    from tests.fakes.twilio_api import FakeTwilio

    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    twilio = FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    adapter = WhatsAppAdapter("acme", _settings(twilio.base_url))
    try:
        clock = Clock()
        outbox = Outbox(sessions, adapters={("acme", "whatsapp"): adapter}, bus=EventBus())
        outbox._breaker = breaker = SendBreaker(clock=clock)
        for _ in range(FAILURES_TO_PAUSE):
            breaker.failed("acme", "whatsapp", error="timeout")
        clock.now += FIRST_PAUSE_S
        late = await _whatsapp_reply(sessions, "+491511230001", wrote_hours_ago=25)
        assert await outbox.deliver(late) == "failed" and twilio.requests == []
        async with sessions() as session:
            failed = await session.get(Message, late)
        assert "outside the 24-hour window" in failed.error
        assert breaker.paused_until("acme", "whatsapp") is None  # the next reply is the probe, at once
        assert breaker.paused_until("acme", "whatsapp") is not None  # the pause stands: the others wait for it
    finally:
        await adapter.stop()
        twilio.stop()
        await engine.dispose()


async def test_a_reply_rescheduled_behind_a_pause_keeps_what_an_attempt_stored_on_it_meanwhile(migrated_url) -> None:
    """Rescheduled for a pause's end, a reply's `meta` was written back whole as the outbox had read it: what another
    attempt at it settled meanwhile (the parts it landed, `meta.delivered_parts`) was lost, and those parts were
    sent again."""
    async with _telegram_outbox(migrated_url) as (sessions, _, outbox):
        reply_id = await _reply(sessions, "acme", "903", 0)
        other = session_factory(sessions.kw["bind"])

        class SettledAfterTheRead(AsyncSession):
            async def get(self, *args, **kwargs):
                row = await super().get(*args, **kwargs)
                if row is not None and row.id == reply_id:  # another worker's attempt commits now
                    async with other() as session, session.begin():
                        await session.execute(update(Message).where(Message.id == reply_id)
                                              .values(meta={"delivered_parts": ["41"]}))
                return row

        outbox._sessions = async_sessionmaker(sessions.kw["bind"], class_=SettledAfterTheRead, expire_on_commit=False)
        outbox._breaker = breaker = SendBreaker()
        for _ in range(FAILURES_TO_PAUSE):
            breaker.failed("acme", "telegram", error="unreachable")
        assert await outbox.deliver(reply_id) == "deferred"
        async with sessions() as session:
            reply = await session.get(Message, reply_id)
        assert reply.meta["delivered_parts"] == ["41"] and next_attempt_at(reply) > utcnow()
