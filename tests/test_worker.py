"""The worker: per-conversation order, exactly-once answers, and recovery after a crash."""

from __future__ import annotations

import asyncio
import random

import pytest
from sqlalchemy import func, select

from gateway.delivery.outbox import Outbox
from gateway.models import ConversationRef, InboundMessage, Sender
from storage.models import Conversation, Message
from tests.worker_rig import EchoPipeline, RecordingAdapter, build_worker, chat_message, kill_worker


async def test_worker_keeps_order_per_conversation_under_concurrency(migrated_url):
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    await worker.start()
    chats = ["alice", "bob", "carol"]

    async def customer(chat: str) -> None:  # each customer sends in order while the worker runs
        for n in range(6):
            await inbox.accept("acme", chat_message(chat, n))
            await asyncio.sleep(random.uniform(0, 0.01))

    await asyncio.gather(*[customer(chat) for chat in chats])
    await worker.run_until_idle(timeout=30)
    await worker.stop()
    assert not pipeline.overlap, "one conversation was processed by two tasks at once"
    for chat in chats:
        texts = [t for _, t in pipeline.seen if t.startswith(chat)]
        assert texts == sorted(texts, key=lambda t: int(t.split("#")[1]))
        replies = [t for c, t in adapter.sent if c == chat]
        assert replies == [f"echo: {chat} #{n}" for n in range(6)]
    await engine.dispose()


@pytest.mark.parametrize("copies", [5])
async def test_worker_concurrent_duplicate_deliveries_get_one_reply(migrated_url, copies):
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    await worker.start()
    await asyncio.gather(*[inbox.accept("acme", chat_message("dave", 1)) for _ in range(copies)])
    await worker.run_until_idle(timeout=30)
    await worker.stop()
    assert adapter.sent == [("dave", "echo: dave #1")]
    await engine.dispose()


async def test_worker_drops_bot_reply_when_operator_takes_over_mid_answer(migrated_url):
    from sqlalchemy import update

    from storage.models import Conversation

    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline())

    class TakenOver(EchoPipeline):
        async def handle(self, turn):
            async with sessions() as session, session.begin():  # an operator claims while the model runs
                await session.execute(update(Conversation).where(Conversation.id == turn.conversation_id)
                                      .values(state="operator", assigned_operator="sam"))
            return await super().handle(turn)

    relayed: list[int] = []

    async def relay(message_id: int) -> None:
        relayed.append(message_id)

    worker.handler._pipeline = TakenOver()
    worker.handler._on_handoff_message = relay
    await inbox.accept("acme", chat_message("erin", 1))
    await worker.run_until_idle(timeout=30)
    assert adapter.sent == []
    async with sessions() as session:
        inbound = (await session.execute(select(Message).where(Message.direction == "in"))).scalar_one()
        outbound = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
    assert inbound.status == "done" and outbound == []
    # The question the bot no longer answers reaches the operator who took the thread.
    assert relayed == [inbound.id]
    await engine.dispose()


async def test_a_reply_a_dead_replica_left_sending_goes_out_before_the_next_answer(migrated_url):
    # At least once for the interrupted reply (the dead replica may have reached the platform), and in order.
    assert await _replies_after_a_dead_replica(migrated_url, sweep=True) == ["echo: alice #0", "echo: alice #1"]


async def test_the_drain_requeues_a_dead_replicas_reply_without_waiting_for_the_sweep(migrated_url):
    # While the live worker waits for the dead one's reply, it keeps the conversation leased or
    # parked; the periodic sweep takes only unleased conversations and could miss it for long. With
    # the sweep off, the drain itself must requeue the reply once it is two lease periods old.
    assert await _replies_after_a_dead_replica(migrated_url, sweep=False) == ["echo: alice #0", "echo: alice #1"]


async def _replies_after_a_dead_replica(url: str, *, sweep: bool) -> list[str]:
    """A first "process" answers alice #0 and dies while sending the reply (left `sending`, lease
    behind), with alice #1 waiting; what the next replica then sends, in order."""
    sending = asyncio.Event()

    class HangingAdapter(RecordingAdapter):
        async def send(self, message):
            sending.set()
            await asyncio.sleep(3600)

    engine, sessions, inbox, worker, _ = build_worker(url, EchoPipeline(delay=0), lease=0.5, adapter=HangingAdapter())
    for n in range(2):
        await inbox.accept("acme", chat_message("alice", n))
    await worker.start()
    await asyncio.wait_for(sending.wait(), 10)
    await kill_worker(worker, engine)

    engine, sessions, inbox, worker, adapter = build_worker(url, EchoPipeline(delay=0), lease=0.5)
    if not sweep:
        worker._last_requeue = float("inf")  # the periodic sweep never runs
    await worker.start()
    for _ in range(100):
        if len(adapter.sent) >= 2:
            break
        await asyncio.sleep(0.1)
    await worker.stop()
    await engine.dispose()
    return [t for _, t in adapter.sent]


class StreamingPipeline(EchoPipeline):
    """Streams one token before answering, as the LLM step does."""

    async def handle(self, turn):
        await turn.on_token("echo")
        return await super().handle(turn)


async def test_streamed_tokens_go_to_other_processes_only_for_web_chat(migrated_url):
    # Only a web chat request waits on a message's tokens, perhaps in another process: a Telegram
    # answer's tokens stay in this process (on PostgreSQL each forwarded event is a NOTIFY).
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, StreamingPipeline(delay=0), channels=("web", "telegram"))
    forwarded: list[tuple[str, dict]] = []
    worker.handler._bus.forwarder = lambda topic, event: forwarded.append((topic, event))
    await inbox.accept("acme", chat_message("alice", 0))
    await inbox.accept("acme", InboundMessage(channel="telegram", external_id="tg-1", conversation=ConversationRef("telegram", chat="42"),
                                              sender=Sender("42"), text="hello from telegram"))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        web, telegram = (await session.execute(select(Message.id).where(Message.direction == "in").order_by(Message.id))).scalars().all()
    tokens = [topic for topic, event in forwarded if event["type"] == "token"]
    assert tokens == [f"message:{web}"]
    assert {topic for topic, event in forwarded if event["type"] == "done"} == {f"message:{web}", f"message:{telegram}"}
    assert sorted(text for _, text in adapter.sent) == ["echo: alice #0", "echo: hello from telegram"]
    await engine.dispose()


def test_outbox_waits_as_long_as_the_platform_asks_up_to_an_hour() -> None:
    # A Telegram flood wait of 10 minutes retried after the 5-minute cap is refused again: it only burns attempts.
    outbox = Outbox(None, adapters={}, bus=None)  # type: ignore[arg-type]
    assert outbox._backoff(1, retry_after=600.0) == 600.0
    assert outbox._backoff(1, retry_after=86_400.0) == 3600.0
    assert outbox._backoff(10, retry_after=None) == 300.0  # our own exponential backoff keeps its cap
    # A platform's short fixed wait (an adapter's 5 s for a 5xx) is a floor, not the schedule: ten
    # attempts then span minutes, and an outage of that length delays replies instead of losing them.
    waits = [outbox._backoff(attempt, retry_after=5.0) for attempt in range(1, outbox.max_attempts)]
    assert waits[:3] == [5.0, 5.0, 8.0] and sum(waits) > 600


def test_outbox_reads_a_platform_wait_of_nan_as_none_named() -> None:
    # NaN passed max() and min() as NaN, and timedelta(seconds=nan) raised out of delivery; adapters clean
    # their headers (asked_wait), and the outbox, where every one of them ends, does not rely on it.
    outbox = Outbox(None, adapters={}, bus=None)  # type: ignore[arg-type]
    assert outbox._backoff(1, retry_after=float("nan"), rate_limited=True) == outbox._backoff(1, retry_after=None)
    assert outbox._backoff(3, retry_after=float("nan")) == outbox._backoff(3, retry_after=None)
    assert outbox._backoff(1, retry_after=float("inf")) == 3600.0


def test_a_rate_limit_is_waited_as_the_platform_asks_but_never_not_at_all() -> None:
    # The platform's wait is the schedule of a rate-limited send (not a doubling of every try); one of 0 s
    # (or below) retried the reply at once, again and again, until its hour was up.
    outbox = Outbox(None, adapters={}, bus=None)  # type: ignore[arg-type]
    assert outbox._backoff(9, retry_after=20.0, rate_limited=True) == 20.0
    assert outbox._backoff(9, retry_after=0.0, rate_limited=True) == outbox._backoff(9, retry_after=-3, rate_limited=True) == 1.0


async def test_worker_claims_only_as_many_conversations_as_it_has_free_slots(migrated_url):
    """Claimed beyond its slots, a conversation held its lease while it queued for one, and each round's
    oldest 50 went ahead of anything newer (review: a web message waited minutes behind failing sends)."""
    pipeline = EchoPipeline(delay=0.3)
    engine, sessions, inbox, worker, _adapter = build_worker(migrated_url, pipeline)
    for n in range(10):
        await inbox.accept("acme", chat_message(f"chat-{n}", 0))
    try:
        assert await worker._claim_round() == worker.concurrency == 4
        assert await worker._claim_round() == 0  # every slot is busy
        async with sessions() as session:
            leased = (await session.execute(select(func.count()).select_from(Conversation).where(
                Conversation.lease_owner == worker.owner))).scalar_one()
        assert leased == 4
        await worker.run_until_idle(timeout=30)
        assert len(pipeline.seen) == 10
    finally:
        await engine.dispose()


async def test_a_reply_retried_later_is_logged_under_its_turn_and_trace(migrated_url):
    """The retry runs from the drain, outside the turn: it is logged with the turn's message id, bot,
    channel and trace id, as its first attempt was (it had none of them, so a grep by trace lost it)."""
    import structlog

    from gateway.errors import ChannelSendError

    class FailsOnce(RecordingAdapter):
        async def send(self, message):
            if not self.sent and not getattr(self, "failed", False):
                self.failed = True
                raise ChannelSendError("503 from the platform", retry_after=0.05)
            return await super().send(message)

    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(delay=0), adapter=FailsOnce())
    worker._outbox.backoff_s = 0.05
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await inbox.accept("acme", chat_message("alice", 0))
        await worker.run_until_idle(timeout=30)
        for _ in range(100):
            if adapter.sent:
                break
            await worker.run_until_idle(timeout=30)
            await asyncio.sleep(0.05)
    assert adapter.sent == [("alice", "echo: alice #0")]
    started = next(e for e in logs if e["event"] == "pipeline.start")
    retried = [e for e in logs if e["event"] in ("outbound.retry_scheduled", "outbound.sent")]
    assert [e["event"] for e in retried] == ["outbound.retry_scheduled", "outbound.sent"]
    sent = retried[-1]
    assert sent.get("trace_id") == started["trace_id"] and sent.get("bot") == "acme" and sent.get("channel") == "web"
    await engine.dispose()


async def test_outbox_recover_requeues_only_replies_left_sending_past_the_window(migrated_url):
    """At start, a reply a crash left `sending` goes back to `pending`; one sent just now does not."""
    from datetime import timedelta

    from sqlalchemy import update

    from gateway.models import utcnow
    from storage import repositories as repo

    engine, sessions, _inbox, worker, _adapter = build_worker(migrated_url, EchoPipeline())
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef("web", chat="alice"), contact_id=None)
            stale = await repo.add_outbound(session, conversation=conversation, text="left by a crash")
            fresh = await repo.add_outbound(session, conversation=conversation, text="being sent now")
            await session.execute(update(Message).where(Message.id == stale.id).values(
                status="sending", updated_at=utcnow() - timedelta(minutes=5)))
            await session.execute(update(Message).where(Message.id == fresh.id).values(status="sending"))
        assert await worker._outbox.recover(older_than_s=120) == 1
        async with sessions() as session:
            statuses = {m.text: m.status for m in (await session.execute(select(Message))).scalars()}
        assert statuses == {"left by a crash": "pending", "being sent now": "sending"}
    finally:
        await engine.dispose()


async def test_worker_stop_logs_a_turn_it_cancels_with_its_ids_and_leaves_it_pending(migrated_url):
    """A turn still running when the shutdown's wait ends is cancelled: before, the log went from the
    turn's last line to `worker.stopped`, and nothing said a message was handed back unanswered."""
    import structlog

    class Hangs(EchoPipeline):
        async def handle(self, turn):
            self.seen.append((turn.conversation_id, turn.text))
            await asyncio.sleep(3600)

    pipeline = Hangs()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    try:
        with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            accepted = await inbox.accept("acme", chat_message("alice", 0))
            await worker.start()
            for _ in range(200):
                if pipeline.seen:
                    break
                await asyncio.sleep(0.02)
            await worker.stop(timeout=0.2)
        [abandoned] = [e for e in logs if e["event"] == "worker.turn_abandoned"]
        started = next(e for e in logs if e["event"] == "pipeline.start")
        assert abandoned["message_id"] == accepted.message_id
        assert abandoned["conversation_id"] == accepted.conversation_id
        assert abandoned["trace_id"] == started["trace_id"] and abandoned["log_level"] == "warning"
        async with sessions() as session:
            assert (await session.get(Message, accepted.message_id)).status == "pending"
        assert adapter.sent == []
    finally:
        await engine.dispose()


async def test_a_conversation_in_flight_takes_no_next_turn_once_the_stop_is_asked_for(migrated_url):
    # Its turn in hand finishes; the next message waits for the restart instead of a turn the stop cancels.
    release = asyncio.Event()

    class Slow(EchoPipeline):
        async def handle(self, turn):
            await release.wait()
            return await super().handle(turn)

    pipeline = Slow()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    try:
        await inbox.accept("acme", chat_message("erin", 0))
        await inbox.accept("acme", chat_message("erin", 1))
        await worker.start()
        for _ in range(100):
            if worker._active:
                break
            await asyncio.sleep(0.02)
        worker.stop_claiming()
        release.set()
        await asyncio.sleep(0.5)
        await worker.stop()
        assert [t for _, t in pipeline.seen] == ["erin #0"] and adapter.sent == [("erin", "echo: erin #0")]
        async with sessions() as session:
            statuses = (await session.execute(select(Message.status).where(Message.direction == "in")
                                              .order_by(Message.id))).scalars().all()
        assert statuses == ["done", "pending"]
    finally:
        await engine.dispose()
