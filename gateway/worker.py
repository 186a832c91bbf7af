"""The worker: claims conversations with pending messages and processes each one's messages in order.

A conversation is claimed with a lease in the database (an atomic conditional UPDATE), so any
number of workers, in one process or many replicas, never process one conversation at once,
and a dead worker's conversation is picked up when its lease expires. Within a conversation,
unsent replies go out first, then inbound messages are answered oldest first.

Exactly-once answering: the reply is stored and the inbound message marked done in one
transaction; the reply is then sent and marked sent or failed. A crash before that transaction
leaves the message pending (answered after restart); a crash after it leaves the reply pending
(sent after restart).

A reply whose send must be retried later (a rate limit) parks its conversation: the lease is handed
to no one until the retry time, so nothing in that conversation overtakes it and no worker spins on
it. While the pipeline runs, channels with a typing indicator show it, refreshed every few seconds.

Channels with `stream: true` that can edit messages (gateway/streaming.py) show the reply while it is
generated, by sending a message and editing it; the outbox then edits the streamed messages into the
final reply instead of sending it again, and records their ids as the reply's deliveries. A streamed
partial is not part of the exactly-once guarantee: a crash mid-stream (or between the store and the
final edit) leaves the partial message as it was, and after restart the answer is sent again as a
new message. Streamed messages of an answer that is not sent (another worker answered, no reply) are
edited to "—".
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.events import EventBus, conversation_topic, message_topic
from gateway.models import CallerIdentity, ConversationRef, as_utc, utcnow
from gateway.outbox import RETRYING, Outbox, next_attempt_at
from gateway.pipeline import Pipeline, PipelineResult, Turn
from gateway.settings import Settings
from gateway.streaming import EditStreamer, streamer_for
from gateway.tracing import message_context
from gateway.typing_indicator import TYPING_REFRESH_S, start_typing
from storage import repositories as repo
from storage.models import Contact, Conversation, Message, Usage

log = structlog.get_logger("gateway.worker")

PARKED_OWNER = "outbox-backoff"
"""Lease owner of a conversation parked until a reply's retry time; no worker matches it."""

FAILURE_REPLY = ("Sorry, something went wrong on our side while answering. "
                 "I've asked a person from our team to look at your message.")


class Worker:
    """Background processing of the inbox, one conversation at a time per lease."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings, *, pipeline: Pipeline,
                 outbox: Outbox, bus: EventBus, lease_seconds: float = 30.0, concurrency: int = 8,
                 poll_interval: float = 1.0, metrics=None, on_escalate: Callable | None = None,
                 adapters: Mapping | None = None, typing_refresh_s: float = TYPING_REFRESH_S,
                 intercept: Callable | None = None, on_handoff_message: Callable | None = None) -> None:
        self._sessions = sessions
        self._adapters = adapters or {}
        self.typing_refresh_s = typing_refresh_s
        self._settings = settings
        self._pipeline = pipeline
        self._outbox = outbox
        self._bus = bus
        self._metrics = metrics
        self._on_escalate = on_escalate
        # Relay hooks (gateway/operators): an operator's Slack thread reply is taken before the pipeline,
        # and a customer's message while a person holds the thread goes to the operator surfaces.
        self._intercept = intercept
        self._on_handoff_message = on_handoff_message
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._slots = asyncio.Semaphore(concurrency)
        self._active: dict[int, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._claim_lock = asyncio.Lock()
        self._loop_task: asyncio.Task | None = None
        self._stopping = False
        self._last_requeue = 0.0
        self.rate_limiter = None  # gateway.ratelimit.RateLimiter, set by the composition root

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
                await self._requeue_stalled_sends()
                await self._claim_round()
            except Exception:  # the loop must survive a database blip
                log.exception("worker.claim_failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _requeue_stalled_sends(self) -> int:
        """Replies left `sending` by a replica that died: requeue once their conversation's lease is gone.

        Sends happen under the conversation lease, so a stale `sending` row with no live lease belongs
        to a dead worker. At-least-once for that one reply: the dead replica may have reached the platform.
        """
        now = utcnow()
        if now.timestamp() - self._last_requeue < self.lease_seconds:
            return 0
        self._last_requeue = now.timestamp()
        async with self._sessions() as session, session.begin():
            # Ours and still being drained are kept: this process is alive, and its outbox is still
            # recording the outcome (the database was away).
            requeued = await repo.requeue_stalled_sends(session, now=now, older_than=timedelta(seconds=2 * self.lease_seconds),
                                                        keep=list(self._active))
        if requeued:
            log.warning("outbound.requeued_from_dead_worker", count=requeued)
            self._wake.set()
        return requeued

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
                    if message.status == "sending":
                        if await self._requeue_if_stalled(message):
                            continue
                        await self._wait_for_unsettled_reply(message)
                        break
                    if message.direction == "out":
                        if await self._outbox.deliver(message.id) in RETRYING:
                            await self._park(conversation_id, message.id)
                            break
                    else:
                        with message_context(message_id=message.id, conversation_id=conversation_id,
                                             bot=message.bot, channel=message.channel,
                                             traceparent=(message.meta or {}).get("traceparent")):
                            await self._answer(message)
            finally:
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
                async with self._sessions() as session, session.begin():
                    await repo.release_lease(session, conversation_id=conversation_id, owner=self.owner)
            self._wake.set()  # more may have arrived while we held the lease

    async def _park(self, conversation_id: int, message_id: int) -> None:
        """Hand the lease to no one until the reply's retry time; the poll picks it up after that."""
        async with self._sessions() as session:
            message = await session.get(Message, message_id)
            due = (next_attempt_at(message) if message is not None else None) or utcnow()
        await self._park_until(conversation_id, due)
        log.info("conversation.parked", conversation_id=conversation_id, message_id=message_id, until=str(due))

    async def _park_until(self, conversation_id: int, due: datetime) -> None:
        async with self._sessions() as session, session.begin():
            await repo.park_lease(session, conversation_id=conversation_id, owner=self.owner, parked_owner=PARKED_OWNER,
                                  until=max(due, utcnow() + timedelta(milliseconds=100)))

    async def _requeue_if_stalled(self, reply: Message) -> bool:
        """`_requeue_stalled_sends`' rule for a reply in the conversation this worker holds: left
        `sending` for two lease periods, it was a dead replica's; back to `pending`, to send now. Why
        here too: while this worker waits for that reply it keeps the conversation leased or parked,
        so the sweep, which only takes unleased conversations, could miss it for a long time."""
        now = utcnow()
        async with self._sessions() as session, session.begin():
            requeued = await repo.requeue_stalled_send(session, message_id=reply.id, now=now,
                                                       older_than=timedelta(seconds=2 * self.lease_seconds))
        if requeued:
            log.warning("outbound.requeued_from_dead_worker", count=1, message_id=reply.id)
        return requeued

    async def _wait_for_unsettled_reply(self, reply: Message) -> None:
        """Park the conversation while an earlier reply is still `sending`, looking again every poll
        interval. Why: answering the next message first would deliver its reply before that one. The
        sender is either alive (escalation and operator messages are sent outside the worker's lease)
        and done in a moment, or dead, and then `_requeue_stalled_sends` requeues the reply two lease
        periods after it started."""
        await self._park_until(reply.conversation_id, utcnow() + timedelta(seconds=self.poll_interval))
        log.info("conversation.waiting_for_unsettled_reply", conversation_id=reply.conversation_id,
                 message_id=reply.id, sending_since=str(as_utc(reply.updated_at)))

    async def _heartbeat(self, conversation_id: int) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with self._sessions() as session, session.begin():
                    await repo.try_lease(session, conversation_id=conversation_id, owner=self.owner,
                                         seconds=self.lease_seconds)
            except Exception:  # a database blip must not end the heartbeat: renew once it is back
                log.warning("worker.heartbeat_failed", conversation_id=conversation_id, exc_info=True)

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
        if self._intercept is not None and await self._intercept(inbound, conversation):
            await self._finish(inbound, None, status="done")
            return
        bot = self._settings.bot(inbound.bot)
        topic = message_topic(inbound.id)
        streamer = streamer_for(
            self._adapters.get((inbound.bot, inbound.channel)), getattr(bot.channels, inbound.channel, None),
            ConversationRef(channel=conversation.channel, workspace=conversation.workspace, chat=conversation.chat,
                            thread=conversation.thread),
            reply_to=(inbound.meta or {}).get("platform_message_id")) if conversation.state == "bot" else None

        async def on_token(text: str) -> None:
            # Only a web chat request waits on a message's topic, maybe in another process.
            self._bus.publish(topic, {"type": "token", "text": text}, forward=inbound.channel == "web")
            if streamer is not None:
                await streamer.feed(text)

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
        if turn.state == "bot" and await self._rate_limited(inbound, turn):
            return
        bound.info("pipeline.start")
        typing = start_typing(self._adapters.get((inbound.bot, inbound.channel)), conversation,
                              refresh_s=self.typing_refresh_s)
        try:
            result = await self._pipeline.handle(turn)
        except Exception as exc:  # the one broad catch: a crash becomes a logged failure and a handoff
            bound.exception("pipeline.failed")
            result = PipelineResult(reply=FAILURE_REPLY, escalate=f"pipeline error: {type(exc).__name__}",
                                    answered=False, error=str(exc)[:500])
        finally:
            if typing is not None:
                typing.cancel()
                await asyncio.gather(typing, return_exceptions=True)
            if streamer is not None:
                await streamer.close()  # no flush may race the final reply's edits
        try:
            await self._finish(inbound, result, status="failed" if result.error else "done", error=result.error,
                               streamer=streamer)
        finally:
            # The final reply did not replace the streamed text (not stored, or no reply): blank it.
            if streamer is not None and streamer.started and not streamer.finished:
                await streamer.discard()
        if turn.state != "bot" and self._on_handoff_message is not None:
            await self._on_handoff_message(inbound.id)
        if self._metrics:
            self._metrics.observe_stage("pipeline", time.monotonic() - started)
            self._metrics.record_usage(inbound.bot, result.usage)
        bound.info("pipeline.done", replied=result.reply is not None, escalate=result.escalate,
                   duration_ms=round((time.monotonic() - started) * 1000))

    async def _rate_limited(self, inbound: Message, turn: Turn) -> bool:
        """Over a limit: store the message as done with (once per window) the notice, and skip the model."""
        limiter = self.rate_limiter
        if limiter is None or not limiter.enabled_for(inbound.bot):
            return False
        try:
            decision = await limiter.check(bot=inbound.bot, channel=inbound.channel,
                                           contact=turn.identity.contact_external_id or str(turn.conversation_id))
        except Exception:  # the limiter's store being down must not stop answering: fail open
            log.exception("ratelimit.check_failed", bot=inbound.bot)
            return False
        if decision.allowed:
            return False
        if self._metrics:
            self._metrics.rate_limited.labels(bot=inbound.bot, scope=decision.scope).inc()
        result = PipelineResult(reply=limiter.notice(inbound.bot) if decision.notify else None, author="system")
        await self._finish(inbound, result, status="done", error=f"rate limited ({decision.scope})")
        return True

    def _has_bot(self, name: str) -> bool:
        return any(b.name == name for b in self._settings.bots)

    async def _finish(self, inbound: Message, result: PipelineResult | None, *, status: str,
                      error: str | None = None, streamer: EditStreamer | None = None) -> None:
        """Store the reply and mark the inbound message in one transaction, then deliver."""
        outbound_ids: list[int] = []
        async with self._sessions() as session, session.begin():
            # Row lock: a worker that lost its lease and this one cannot both see `pending` (PostgreSQL).
            message = await session.get(Message, inbound.id, with_for_update=True)
            if message.status != "pending":  # another worker finished it (lease lost): do not answer twice
                log.warning("inbound.already_finished", message_id=inbound.id)
                return
            conversation = await session.get(Conversation, inbound.conversation_id)
            if result is not None and result.author == "bot" and result.reply is not None \
                    and conversation.state != "bot":
                # An operator took the thread while the model was answering: the bot must not talk over them.
                log.info("reply.dropped_operator_took_over", message_id=inbound.id,
                         conversation_id=conversation.id, state=conversation.state)
                result.reply = None
                result.escalate = None
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
        for index, out_id in enumerate(outbound_ids):
            # The first reply is the streamed one: the streamer edits it into place instead of a new send.
            via = streamer.finish if streamer is not None and streamer.started and index == 0 else None
            if await self._outbox.deliver(out_id, via=via) in RETRYING:
                break  # the drain loop parks the conversation; the rest wait their turn
