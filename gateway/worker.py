"""The worker: claims conversations with pending messages and processes each one's messages in order.

A conversation is claimed with a lease in the database (an atomic conditional UPDATE), so any
number of workers, in one process or many replicas, never process one conversation at once,
and a dead worker's conversation is picked up when its lease expires. Within a conversation,
unsent replies go out first, then inbound messages are answered oldest first.

Exactly-once answering: the reply is stored and the inbound message marked done in one
transaction; the reply is then sent and marked sent or failed. A crash before that transaction
leaves the message pending (answered after restart); a crash after it leaves the reply pending
(sent after restart).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.events import EventBus, conversation_topic, message_topic
from gateway.models import CallerIdentity, utcnow
from gateway.outbox import Outbox
from gateway.pipeline import Pipeline, PipelineResult, Turn
from gateway.settings import Settings
from storage import repositories as repo
from storage.models import Contact, Conversation, Message, Usage

log = structlog.get_logger("gateway.worker")

FAILURE_REPLY = ("Sorry, something went wrong on our side while answering. "
                 "I've asked a person from our team to look at your message.")


class Worker:
    """Background processing of the inbox, one conversation at a time per lease."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings, *, pipeline: Pipeline,
                 outbox: Outbox, bus: EventBus, lease_seconds: float = 30.0, concurrency: int = 8,
                 poll_interval: float = 1.0, metrics=None, on_escalate: Callable | None = None) -> None:
        self._sessions = sessions
        self._settings = settings
        self._pipeline = pipeline
        self._outbox = outbox
        self._bus = bus
        self._metrics = metrics
        self._on_escalate = on_escalate
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._slots = asyncio.Semaphore(concurrency)
        self._active: dict[int, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._claim_lock = asyncio.Lock()
        self._loop_task: asyncio.Task | None = None
        self._stopping = False

    def notify(self, conversation_id: int | None = None) -> None:
        """Wake the loop now instead of at the next poll."""
        self._wake.set()

    async def start(self) -> None:
        """Start claiming work in the background."""
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop(), name="worker-loop")
        log.info("worker.started", owner=self.owner)

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop claiming; let in-flight conversations finish (up to `timeout`), then cancel."""
        self._stopping = True
        self._wake.set()
        if self._loop_task:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self._active:
            _, pending = await asyncio.wait(list(self._active.values()), timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        log.info("worker.stopped", owner=self.owner)

    async def run_until_idle(self, *, timeout: float = 30.0) -> None:
        """Process everything pending now, then return (used by `chat` and tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            claimed = await self._claim_round()
            if self._active:
                await asyncio.wait(list(self._active.values()), timeout=max(0.0, deadline - time.monotonic()))
            elif not claimed:
                async with self._sessions() as session:
                    if await repo.queue_depth(session) == 0:
                        return
                await asyncio.sleep(0.05)

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self._claim_round()
            except Exception:  # the loop must survive a database blip
                log.exception("worker.claim_failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _claim_round(self) -> int:
        # One claim round at a time: the lease is re-entrant for its owner, so two concurrent rounds
        # of this worker could otherwise both start a task for the same conversation.
        async with self._claim_lock:
            return await self._claim_once()

    async def _claim_once(self) -> int:
        async with self._sessions() as session:
            candidates = await repo.conversations_with_work(session, now=utcnow())
        claimed = 0
        for conversation_id in candidates:
            if conversation_id in self._active or self._stopping:
                continue
            async with self._sessions() as session, session.begin():
                if not await repo.try_lease(session, conversation_id=conversation_id, owner=self.owner,
                                            seconds=self.lease_seconds):
                    continue
            claimed += 1
            task = asyncio.create_task(self._drain(conversation_id), name=f"conversation-{conversation_id}")
            self._active[conversation_id] = task
            task.add_done_callback(lambda _t, cid=conversation_id: self._active.pop(cid, None))
        return claimed

    async def _drain(self, conversation_id: int) -> None:
        """Process the conversation's pending messages in order while holding its lease."""
        async with self._slots:
            heartbeat = asyncio.create_task(self._heartbeat(conversation_id))
            try:
                while not self._stopping:
                    async with self._sessions() as session:
                        message = await repo.next_pending(session, conversation_id=conversation_id)
                    if message is None:
                        break
                    if message.direction == "out":
                        await self._outbox.deliver(message.id)
                    else:
                        await self._answer(message)
            finally:
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
                async with self._sessions() as session, session.begin():
                    await repo.release_lease(session, conversation_id=conversation_id, owner=self.owner)
            self._wake.set()  # more may have arrived while we held the lease

    async def _heartbeat(self, conversation_id: int) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            async with self._sessions() as session, session.begin():
                await repo.try_lease(session, conversation_id=conversation_id, owner=self.owner,
                                     seconds=self.lease_seconds)

    async def _answer(self, inbound: Message) -> None:
        bound = log.bind(message_id=inbound.id, conversation_id=inbound.conversation_id, bot=inbound.bot,
                         channel=inbound.channel)
        started = time.monotonic()
        async with self._sessions() as session:
            conversation = await session.get(Conversation, inbound.conversation_id)
            contact = await session.get(Contact, conversation.contact_id) if conversation.contact_id else None
            past = await repo.history(session, conversation_id=conversation.id, before_id=inbound.id,
                                      limit=self._settings.bot(inbound.bot).history_turns * 2
                                      if self._has_bot(inbound.bot) else 0)
        if not self._has_bot(inbound.bot):
            await self._finish(inbound, None, status="ignored", error="bot no longer configured")
            return
        bot = self._settings.bot(inbound.bot)
        topic = message_topic(inbound.id)

        async def on_token(text: str) -> None:
            self._bus.publish(topic, {"type": "token", "text": text})

        turn = Turn(
            bot=bot, message_id=inbound.id, conversation_id=conversation.id, state=conversation.state,
            text=inbound.text, attachments=list(inbound.attachments or []),
            history=[{"role": "user" if m.direction == "in" else "assistant", "content": m.text,
                      "author": m.author} for m in past if m.text],
            identity=CallerIdentity(bot=bot.name, channel=inbound.channel,
                                    contact_external_id=contact.external_id if contact else "",
                                    contact_id=contact.id if contact else None, conversation_id=conversation.id),
            unanswered_turns=conversation.unanswered_turns, on_token=on_token,
            command=(inbound.meta or {}).get("command"),
            greeting=getattr(getattr(bot.channels, inbound.channel, None), "greeting", None),
        )
        bound.info("pipeline.start")
        try:
            result = await self._pipeline.handle(turn)
        except Exception as exc:  # the one broad catch: a crash becomes a logged failure and a handoff
            bound.exception("pipeline.failed")
            result = PipelineResult(reply=FAILURE_REPLY, escalate=f"pipeline error: {type(exc).__name__}",
                                    answered=False, error=str(exc)[:500])
        await self._finish(inbound, result, status="failed" if result.error else "done", error=result.error)
        if self._metrics:
            self._metrics.observe_stage("pipeline", time.monotonic() - started)
        bound.info("pipeline.done", replied=result.reply is not None, escalate=result.escalate,
                   duration_ms=round((time.monotonic() - started) * 1000))

    def _has_bot(self, name: str) -> bool:
        return any(b.name == name for b in self._settings.bots)

    async def _finish(self, inbound: Message, result: PipelineResult | None, *, status: str,
                      error: str | None = None) -> None:
        """Store the reply and mark the inbound message in one transaction, then deliver."""
        outbound_ids: list[int] = []
        async with self._sessions() as session, session.begin():
            message = await session.get(Message, inbound.id, with_for_update=False)
            if message.status != "pending":  # another worker finished it (lease lost): do not answer twice
                log.warning("inbound.already_finished", message_id=inbound.id)
                return
            conversation = await session.get(Conversation, inbound.conversation_id)
            if result is not None:
                for text in result.replies():
                    out = await repo.add_outbound(
                        session, conversation=conversation, text=text, reply_to_id=inbound.id,
                        author=result.author, citations=[c.as_dict() for c in result.citations],
                        tool_calls=result.tool_calls, retrieved=result.retrieved)
                    outbound_ids.append(out.id)
                if result.reply is not None:
                    conversation.unanswered_turns = 0 if result.answered else conversation.unanswered_turns + 1
                for usage in result.usage:
                    session.add(Usage(bot=inbound.bot, conversation_id=conversation.id, message_id=inbound.id,
                                      model=usage["model"], prompt_tokens=usage["prompt_tokens"],
                                      completion_tokens=usage["completion_tokens"],
                                      cost_usd=usage["cost_usd"] or 0.0, partial=usage["partial"]))
                if result.escalate and self._on_escalate is not None:
                    await self._on_escalate(session, conversation=conversation, reason=result.escalate)
            message.status = status
            message.error = error
            message.updated_at = utcnow()
        self._bus.publish(message_topic(inbound.id), {"type": "done", "status": status})
        self._bus.publish(conversation_topic(inbound.conversation_id), {"type": "message"})
        for out_id in outbound_ids:
            await self._outbox.deliver(out_id)
