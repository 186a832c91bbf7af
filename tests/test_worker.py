"""The worker: per-conversation order, exactly-once answers, and recovery after a crash."""

from __future__ import annotations

import asyncio
import random

import pytest
from sqlalchemy import func, select

from channels.base import Capabilities
from gateway.delivery.outbox import Outbox
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.pipeline import PipelineResult
from gateway.settings import BotSettings, Settings
from gateway.worker import Worker
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message, Usage


class RecordingAdapter:
    """A channel that records what it was asked to send."""

    name = "web"
    capabilities = Capabilities(max_length=4000, markdown="markdown")

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def send(self, message):
        self.sent.append((message.conversation.chat, message.text))
        return [f"p{len(self.sent)}"]


class EchoPipeline:
    """Answers 'echo: <text>' after a random delay, recording the order it saw messages in."""

    def __init__(self, *, delay: float = 0.02, crash_on: str | None = None) -> None:
        self.delay = delay
        self.crash_on = crash_on
        self.seen: list[tuple[int, str]] = []
        self.active: set[int] = set()
        self.overlap = False

    async def handle(self, turn):
        if turn.conversation_id in self.active:
            self.overlap = True
        self.active.add(turn.conversation_id)
        try:
            self.seen.append((turn.conversation_id, turn.text))
            await asyncio.sleep(random.uniform(0, self.delay))
            if turn.text == self.crash_on:
                raise RuntimeError("boom")
            return PipelineResult(reply=f"echo: {turn.text}")
        finally:
            self.active.discard(turn.conversation_id)


def _settings(**worker) -> Settings:
    return Settings(bots=[BotSettings(name="acme")], worker=worker)


def _msg(chat: str, n: int) -> InboundMessage:
    return InboundMessage(channel="web", external_id=f"{chat}-{n}", conversation=ConversationRef("web", chat=chat),
                          sender=Sender(chat), text=f"{chat} #{n}")


def _build(url: str, pipeline, *, lease: float = 5.0, channels: tuple[str, ...] = ("web",),
           adapter: RecordingAdapter | None = None, settings: Settings | None = None):
    engine = create_engine(url)
    sessions = session_factory(engine)
    bus = EventBus()
    adapter = adapter or RecordingAdapter()
    outbox = Outbox(sessions, adapters={("acme", channel): adapter for channel in channels}, bus=bus)
    worker = Worker(sessions, settings or _settings(), pipeline=pipeline, outbox=outbox, bus=bus, lease_seconds=lease,
                    poll_interval=0.05, concurrency=4)
    inbox = Inbox(sessions, on_stored=worker.notify)
    return engine, sessions, inbox, worker, adapter


async def _die(worker: Worker, engine) -> None:
    """End a worker as SIGKILL would: its tasks stop mid-step, its leases and `sending` rows stay behind."""
    worker._stopping = True
    for task in [worker._loop_task, *worker._active.values()]:
        task.cancel()
    await asyncio.sleep(0.05)
    await engine.dispose()


async def test_worker_keeps_order_per_conversation_under_concurrency(migrated_url):
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline)
    await worker.start()
    chats = ["alice", "bob", "carol"]

    async def customer(chat: str) -> None:  # each customer sends in order while the worker runs
        for n in range(6):
            await inbox.accept("acme", _msg(chat, n))
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


async def test_worker_crash_in_pipeline_becomes_logged_failure_reply(migrated_url):
    pipeline = EchoPipeline(crash_on="alice #1")
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline)
    for n in range(3):
        await inbox.accept("acme", _msg("alice", n))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        inbound = (await session.execute(select(Message).where(Message.direction == "in").order_by(Message.id))).scalars().all()
    assert [m.status for m in inbound] == ["done", "failed", "done"]
    assert "something went wrong" in adapter.sent[1][1]  # never silence, never a stack trace
    assert "boom" not in adapter.sent[1][1]
    assert adapter.sent[2][1] == "echo: alice #2"  # the conversation kept going
    await engine.dispose()


async def test_worker_turn_past_its_deadline_is_handed_off_keeping_what_it_spent(migrated_url):
    # A turn stuck in a model call (retries and fallbacks multiply each call's own timeout) must not keep
    # the customer waiting: past worker.turn_timeout it is stopped, and what it spent and did is stored.
    pipeline = EchoPipeline(delay=0)
    echo = pipeline.handle

    async def stuck_on_alice_1(turn):
        if turn.text != "alice #1":
            return await echo(turn)
        turn.record.usage.append({"model": "primary", "prompt_tokens": 120, "completion_tokens": 0,
                                  "cost_usd": 0.001, "partial": False})
        turn.record.tool_calls.append({"round": 1, "id": "c1", "name": "lookup", "arguments": {},
                                       "result": {"status": "open"}})
        await asyncio.sleep(3600)

    pipeline.handle = stuck_on_alice_1
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline,
                                                      settings=_settings(turn_timeout=0.3))
    for n in range(3):
        await inbox.accept("acme", _msg("alice", n))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        messages = (await session.execute(select(Message).order_by(Message.id))).scalars().all()
        usage = (await session.execute(select(Usage))).scalars().all()
    inbound = [m for m in messages if m.direction == "in"]
    assert [m.status for m in inbound] == ["done", "failed", "done"]
    assert "worker.turn_timeout" in inbound[1].error
    assert "something went wrong" in adapter.sent[1][1]
    # The worker is not held by the stuck turn (this one has no escalation service, so the bot answers on).
    assert adapter.sent[2][1] == "echo: alice #2"
    failure = next(m for m in messages if m.reply_to_id == inbound[1].id)
    assert failure.tool_calls[0]["name"] == "lookup"
    assert [(u.message_id, u.prompt_tokens) for u in usage] == [(inbound[1].id, 120)]
    await engine.dispose()


async def test_worker_crash_keeps_the_tool_calls_made_before_it(migrated_url):
    pipeline = EchoPipeline(delay=0)

    async def crash_after_a_tool(turn):
        turn.record.tool_calls.append({"round": 1, "id": "c1", "name": "create_ticket", "arguments": {},
                                       "result": {"ticket": "T-1"}})
        raise RuntimeError("boom")

    pipeline.handle = crash_after_a_tool
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline)
    await inbox.accept("acme", _msg("alice", 0))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        reply = (await session.execute(select(Message).where(Message.direction == "out"))).scalar_one()
    # The ticket exists: an operator reading the failed turn must see that it was made.
    assert reply.tool_calls == [{"round": 1, "id": "c1", "name": "create_ticket", "arguments": {},
                                 "result": {"ticket": "T-1"}}]
    await engine.dispose()


async def test_worker_restart_answers_unanswered_messages_once(migrated_url):
    # First "process": stores three messages, starts answering, and dies mid-answer (its task is
    # cancelled while the pipeline sleeps, and its lease is left behind, as after SIGKILL).
    slow = EchoPipeline(delay=0)
    started = asyncio.Event()

    async def hang(turn):
        started.set()
        await asyncio.sleep(3600)

    slow.handle = hang
    engine, sessions, inbox, worker, adapter = _build(migrated_url, slow, lease=1.0)
    for n in range(3):
        await inbox.accept("acme", _msg("alice", n))
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await _die(worker, engine)
    assert adapter.sent == []

    # Second process: a new worker (new owner) takes over once the dead lease expires.
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline, lease=1.0)
    await worker.start()
    await asyncio.sleep(1.2)
    await worker.run_until_idle(timeout=30)
    await worker.stop()
    assert [t for _, t in adapter.sent] == ["echo: alice #0", "echo: alice #1", "echo: alice #2"]
    async with sessions() as session:
        outbound = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
    assert len(outbound) == 3 and {m.status for m in outbound} == {"sent"}
    await engine.dispose()


@pytest.mark.parametrize("copies", [5])
async def test_worker_concurrent_duplicate_deliveries_get_one_reply(migrated_url, copies):
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline)
    await worker.start()
    await asyncio.gather(*[inbox.accept("acme", _msg("dave", 1)) for _ in range(copies)])
    await worker.run_until_idle(timeout=30)
    await worker.stop()
    assert adapter.sent == [("dave", "echo: dave #1")]
    await engine.dispose()


async def test_worker_drops_bot_reply_when_operator_takes_over_mid_answer(migrated_url):
    from sqlalchemy import update

    from storage.models import Conversation

    engine, sessions, inbox, worker, adapter = _build(migrated_url, EchoPipeline())

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
    await inbox.accept("acme", _msg("erin", 1))
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

    engine, sessions, inbox, worker, _ = _build(url, EchoPipeline(delay=0), lease=0.5, adapter=HangingAdapter())
    for n in range(2):
        await inbox.accept("acme", _msg("alice", n))
    await worker.start()
    await asyncio.wait_for(sending.wait(), 10)
    await _die(worker, engine)

    engine, sessions, inbox, worker, adapter = _build(url, EchoPipeline(delay=0), lease=0.5)
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
    engine, sessions, inbox, worker, adapter = _build(migrated_url, StreamingPipeline(delay=0), channels=("web", "telegram"))
    forwarded: list[tuple[str, dict]] = []
    worker.handler._bus.forwarder = lambda topic, event: forwarded.append((topic, event))
    await inbox.accept("acme", _msg("alice", 0))
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


async def test_worker_claims_only_as_many_conversations_as_it_has_free_slots(migrated_url):
    """Claimed beyond its slots, a conversation held its lease while it queued for one, and each round's
    oldest 50 went ahead of anything newer (review: a web message waited minutes behind failing sends)."""
    pipeline = EchoPipeline(delay=0.3)
    engine, sessions, inbox, worker, _adapter = _build(migrated_url, pipeline)
    for n in range(10):
        await inbox.accept("acme", _msg(f"chat-{n}", 0))
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


async def test_a_tool_call_an_attempt_finished_is_replayed_after_a_crash_then_forgotten(migrated_url):
    # The first "process" runs a tool and dies writing the answer; the journal it saved on the message
    # is what the next process's attempt replays (gateway/pipeline/tool_journal.py).
    started = asyncio.Event()
    pipeline = EchoPipeline(delay=0)

    keys: list[str] = []

    async def tool_then_hang(turn):
        keys.append(turn.tool_journal.key("create_ticket", {"title": "refund"}))
        await turn.tool_journal.record("create_ticket", {"title": "refund"}, result={"ticket": "T-1"},
                                       error=None, escalate=None)
        started.set()
        await asyncio.sleep(3600)

    pipeline.handle = tool_then_hang
    engine, sessions, inbox, worker, adapter = _build(migrated_url, pipeline, lease=1.0)
    await inbox.accept("acme", _msg("alice", 0))
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await _die(worker, engine)

    replayed: list = []
    retry = EchoPipeline(delay=0)

    async def replay(turn):
        keys.append(turn.tool_journal.key("create_ticket", {"title": "refund"}))
        replayed.append(turn.tool_journal.replay("create_ticket", {"title": "refund"}))
        return PipelineResult(reply="Ticket T-1 is open.")

    retry.handle = replay
    engine, sessions, inbox, worker, adapter = _build(migrated_url, retry, lease=1.0)
    await worker.start()
    await asyncio.sleep(1.2)  # the dead lease expires
    await worker.run_until_idle(timeout=30)
    await worker.stop()
    assert replayed == [{"name": "create_ticket", "arguments": {"title": "refund"}, "result": {"ticket": "T-1"},
                         "error": None, "escalate": None}]
    assert adapter.sent == [("alice", "Ticket T-1 is open.")]
    assert len(keys) == 2 and keys[0] == keys[1]  # the same call has the same idempotency key in both processes
    async with sessions() as session:
        inbound = (await session.execute(select(Message).where(Message.direction == "in"))).scalar_one()
    # Answered, so never attempted again: the journal is not kept beside the reply's own record.
    assert inbound.status == "done" and "tool_runs" not in (inbound.meta or {})
    await engine.dispose()
