"""A worker on a real database with a recording channel and a scripted pipeline, for the worker's tests."""

from __future__ import annotations

import asyncio
import random

from sqlalchemy import event, select, text, update

from channels.base import Capabilities
from gateway.delivery.outbox import Outbox
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.pipeline import PipelineResult
from gateway.settings import BotSettings, Settings
from gateway.worker import Worker
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message


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


def worker_settings(**worker) -> Settings:
    return Settings(bots=[BotSettings(name="acme")], worker=worker)


def chat_message(chat: str, n: int) -> InboundMessage:
    return InboundMessage(channel="web", external_id=f"{chat}-{n}", conversation=ConversationRef("web", chat=chat),
                          sender=Sender(chat), text=f"{chat} #{n}")


class WithSessions:
    """A pipeline or channel that uses the worker's database itself: `build_worker` makes it from its sessions
    (`build_worker(url, Subclass)`)."""

    def __init__(self, sessions, **options) -> None:
        super().__init__(**options)
        self.sessions = sessions


def build_worker(url: str, pipeline, *, lease: float = 5.0, channels: tuple[str, ...] = ("web",),
           adapter=None, settings: Settings | None = None):
    """A worker on `url`: (engine, sessions, inbox, worker, adapter). `pipeline` and `adapter` are the objects, or
    callables (a `WithSessions` class) that make them from the worker's sessions."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    bus = EventBus()
    pipeline = pipeline(sessions) if callable(pipeline) else pipeline
    adapter = (adapter(sessions) if callable(adapter) else adapter) or RecordingAdapter()
    outbox = Outbox(sessions, adapters={("acme", channel): adapter for channel in channels}, bus=bus)
    worker = Worker(sessions, settings or worker_settings(), pipeline=pipeline, outbox=outbox, bus=bus, lease_seconds=lease,
                    poll_interval=0.05, concurrency=4)
    inbox = Inbox(sessions, on_stored=worker.notify)
    return engine, sessions, inbox, worker, adapter


async def kill_worker(worker: Worker, engine) -> None:
    """End a worker as SIGKILL would: its tasks stop mid-step, its leases and `sending` rows stay behind.

    A cancelled drain releases its lease on the way out, which SIGKILL never lets it do: the leases it held
    are put back as they were, so the next worker waits for them to expire, as after a real crash. The loop
    stops first: a conversation it claimed after the leases were read was released and not put back. Only the
    loop claims; `_stopping` is set after the read, or a drain between two steps ended and released its lease."""
    if worker._loop_task is not None:
        worker._loop_task.cancel()
        await asyncio.gather(worker._loop_task, return_exceptions=True)
    async with worker._sessions() as session:
        held = (await session.execute(select(Conversation.id, Conversation.lease_owner, Conversation.lease_until)
                                      .where(Conversation.lease_owner == worker.owner))).all()
    worker._stopping = True
    drains = list(worker._active.values())
    for task in drains:
        task.cancel()
    await asyncio.gather(*drains, return_exceptions=True)
    async with worker._sessions() as session, session.begin():
        for conversation_id, owner, until in held:
            await session.execute(update(Conversation).where(Conversation.id == conversation_id)
                                  .values(lease_owner=owner, lease_until=until))
    await engine.dispose()


async def answer_one(url: str, pipeline: EchoPipeline) -> tuple[Message, RecordingAdapter]:
    """One customer message answered by a worker running `pipeline` (its `handle` swapped for the case
    at hand): the reply it stored, and the adapter it sent through."""
    engine, sessions, inbox, worker, adapter = build_worker(url, pipeline)
    try:
        await inbox.accept("acme", chat_message("alice", 0))
        await worker.run_until_idle(timeout=30)
        async with sessions() as session:
            reply = (await session.execute(select(Message).where(Message.direction == "out"))).scalar_one()
        return reply, adapter
    finally:
        await engine.dispose()


async def until_waiting_for_a_lock(engine, *, unless_done: asyncio.Task | None = None) -> None:
    """Until a connection to the engine's database waits for a lock, or the task `unless_done` has finished (it
    took every lock it wanted). PostgreSQL shows the wait (pg_stat_activity); SQLite has one writer and no such
    view: there, a statement that takes the write lock (a write, or a read FOR UPDATE: storage/engine.py) begun
    and not returned is one that waits, as the test holds that lock. So on SQLite, call it before the other
    side's first statement (right after starting its task)."""
    if engine.dialect.name == "sqlite":
        return await _until_a_writer_waits(engine, unless_done)
    for _ in range(1000):
        if unless_done is not None and unless_done.done():
            return
        async with engine.connect() as connection:
            if await connection.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                            " AND wait_event_type = 'Lock'")):
                return
        await asyncio.sleep(0.01)
    raise AssertionError("nothing waited for a lock")


async def _until_a_writer_waits(engine, unless_done: asyncio.Task | None) -> None:
    writing: set[int] = set()

    # Before the statement is compiled, not before its cursor runs it: the engine's listener there takes the
    # write lock for a read FOR UPDATE (BEGIN IMMEDIATE), and would wait before a listener of ours ran.
    def began(_conn, statement, *_args) -> None:
        if getattr(statement, "is_dml", False) or getattr(statement, "_for_update_arg", None) is not None:
            writing.add(id(statement))

    def returned(_conn, statement, *_args) -> None:
        writing.discard(id(statement))

    event.listen(engine.sync_engine, "before_execute", began)
    event.listen(engine.sync_engine, "after_execute", returned)
    try:
        for _ in range(1000):
            if writing or (unless_done is not None and unless_done.done()):
                return
            await asyncio.sleep(0.01)
    finally:
        event.remove(engine.sync_engine, "before_execute", began)
        event.remove(engine.sync_engine, "after_execute", returned)
    raise AssertionError("nothing waited for a lock")
