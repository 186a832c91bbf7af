"""The worker: claims conversations with pending messages and processes each one's messages in order.

A conversation is claimed with a lease in the database (an atomic conditional UPDATE), so any
number of workers, in one process or many replicas, never process one conversation at once,
and a dead worker's conversation is picked up when its lease expires. Within a conversation,
unsent replies go out first, then inbound messages are answered oldest first.

A reply whose send must be retried later (a rate limit) parks its conversation: the lease is handed
to no one until the retry time, so nothing in that conversation overtakes it and no worker spins on it.
So does a burst whose customer may still be typing (gateway/burst.py), until the time to look again.

Handling one inbound message (exactly-once store-then-send, typing, streaming) is gateway/message_handler.py.
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

from gateway.background import cancel
from gateway.backoff import doubling
from gateway.burst import BURST_OWNER, Burst, unchanged
from gateway.delivery.outbox import RETRYING, Outbox, next_attempt_at
from gateway.delivery.typing_indicator import TYPING_REFRESH_S
from gateway.events import EventBus
from gateway.message_handler import MessageHandler
from gateway.models import as_utc, utcnow
from gateway.observability.outage import OutageLog
from gateway.observability.tracing import message_context
from gateway.pipeline import Pipeline
from gateway.settings import Settings
from storage import repositories as repo
from storage.models import Conversation, Message

log = structlog.get_logger("gateway.worker")

PARKED_OWNER = "outbox-backoff"
"""Lease owner of a conversation parked until a reply's retry time; no worker matches it."""

_MAX_TRACKED_FAILURES = 1000
"""Conversations whose failed drains in a row a worker counts at most (for the back-off's doubling)."""


def _park_end(due: datetime) -> datetime:
    """A park's end: `due`, or 100 ms from now if that is later (a due time already past parks briefly)."""
    return max(due, utcnow() + timedelta(milliseconds=100))


class Worker:
    """Background processing of the inbox, one conversation at a time per lease."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings, *, pipeline: Pipeline,
                 outbox: Outbox, bus: EventBus, lease_seconds: float = 30.0, concurrency: int = 8,
                 poll_interval: float = 1.0, metrics=None, on_escalate: Callable | None = None,
                 adapters: Mapping | None = None, typing_refresh_s: float = TYPING_REFRESH_S,
                 intercept: Callable | None = None, on_handoff_message: Callable | None = None) -> None:
        self._sessions = sessions
        self._outbox = outbox
        self.handler = MessageHandler(sessions, settings, pipeline=pipeline, outbox=outbox, bus=bus,
                                      metrics=metrics, adapters=adapters, typing_refresh_s=typing_refresh_s,
                                      intercept=intercept, on_handoff_message=on_handoff_message,
                                      on_escalate=on_escalate)
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.concurrency = concurrency
        self._active: dict[int, asyncio.Task] = {}
        self._failed_drains: dict[int, int] = {}  # conversation id -> drains that failed in a row
        self._wake = asyncio.Event()
        self._claim_lock = asyncio.Lock()
        self._loop_task: asyncio.Task | None = None
        self._stopping = False
        self._last_requeue = 0.0

    def notify(self, conversation_id: int | None = None) -> None:
        """Wake the loop now instead of at the next poll (which conversation has work does not matter:
        the claim round looks at them all)."""
        self._wake.set()

    async def start(self) -> None:
        """Start claiming work in the background."""
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop(), name="worker-loop")
        log.info("worker.started", owner=self.owner)

    def stop_claiming(self) -> None:
        """Take no new turn from now on; the ones in flight go on, and `stop` waits for them. Called as
        the stop is asked for (SIGTERM): until the lifespan's `stop`, after the server's wait for open
        requests, a turn started was paid for, cancelled, and paid again after the restart. What is not
        claimed stays pending for the next start. Only sets a flag: safe in a signal handler."""
        self._stopping = True

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop claiming; let in-flight conversations finish (up to `timeout`), then cancel. A turn cancelled
        so is logged as `worker.turn_abandoned` with its ids: its message stays pending for the restart."""
        self._stopping = True
        self._wake.set()
        if self._loop_task:
            await cancel([self._loop_task])
        if self._active:
            log.info("worker.stopping", owner=self.owner, in_flight=len(self._active), wait_s=timeout)
            _, pending = await asyncio.wait(list(self._active.values()), timeout=timeout)
            await cancel(pending)
        await self.handler.close()
        log.info("worker.stopped", owner=self.owner)

    async def run_until_idle(self, *, timeout: float = 30.0) -> None:
        """Process everything pending now, then return (the tests drive the worker with it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            claimed = await self._claim_round()
            if self._active:  # a freed slot takes the next conversation
                await asyncio.wait(list(self._active.values()), timeout=max(0.0, deadline - time.monotonic()),
                                   return_when=asyncio.FIRST_COMPLETED)
            elif not claimed:
                async with self._sessions() as session:
                    if await repo.queue_depth(session) == 0:
                        return
                await asyncio.sleep(0.05)

    async def _loop(self) -> None:
        outage = OutageLog()  # a database outage: one line a minute, not one a poll
        while not self._stopping:
            try:
                await self._requeue_stalled_sends()
                await self._claim_round()
                if (down := outage.recovered()) is not None:
                    log.info("worker.claim_recovered", down_s=round(down, 1))
            except Exception:  # the loop must survive a database blip
                if outage.failed():
                    log.exception("worker.claim_failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    @property
    def _stalled_after(self) -> timedelta:
        """How long a reply may stay `sending` before it counts as a dead replica's: two lease periods."""
        return timedelta(seconds=2 * self.lease_seconds)

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
            requeued = await repo.requeue_stalled_sends(session, now=now, older_than=self._stalled_after,
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
        # `concurrency` bounds the conversations in flight, and only as many as there are free slots are
        # claimed: one claimed to wait for a slot would hold its lease while it waited, and each round's
        # oldest 50 would queue ahead of anything newer.
        free = self.concurrency - len(self._active)
        if free <= 0 or self._stopping:
            return 0
        async with self._sessions() as session:
            candidates = await repo.conversations_with_work(session, now=utcnow())
        claimed = 0
        for conversation_id in candidates:
            if claimed >= free or self._stopping:
                break
            if conversation_id in self._active:
                continue
            async with self._sessions() as session, session.begin():
                if not await repo.try_lease(session, conversation_id=conversation_id, owner=self.owner,
                                            seconds=self.lease_seconds):
                    continue
            claimed += 1
            task = asyncio.create_task(self._drain(conversation_id), name=f"conversation-{conversation_id}")
            self._active[conversation_id] = task
            task.add_done_callback(lambda done, cid=conversation_id: self._drain_finished(cid, done))
        return claimed

    def _drain_finished(self, conversation_id: int, task: asyncio.Task) -> None:
        """Forget a finished drain, and log one the database ended (a restart, a failover) with its
        conversation. Its messages stay pending and its lease is released or lapses, so a later claim
        round takes the conversation again. Why here: nothing awaits a drain, so its error was only
        asyncio's "Task exception was never retrieved", at garbage collection, naming no conversation."""
        self._active.pop(conversation_id, None)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("worker.drain_failed", conversation_id=conversation_id, error=type(error).__name__,
                      exc_info=error)
            self._wake.set()

    async def _drain(self, conversation_id: int) -> None:
        """Process the conversation's pending messages in order while holding its lease."""
        heartbeat = asyncio.create_task(self._heartbeat(conversation_id))
        try:
            while not self._stopping:
                if heartbeat.done():
                    # Its new holder drains the conversation now; going on would answer its messages twice
                    # (the message in hand, if any, was finished once: `_finish` checks it under a lock).
                    if heartbeat.result():
                        log.warning("worker.lease_lost", conversation_id=conversation_id, owner=self.owner)
                    break
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
                    # A retry, or a send a restart left: logged under its turn's ids and trace, as its first attempt was.
                    with message_context(message_id=message.reply_to_id or message.id, conversation_id=conversation_id,
                                         bot=message.bot, channel=message.channel,
                                         traceparent=await self._traceparent_of(message)):
                        if retrying := await self._outbox.deliver(message.id) in RETRYING:
                            await self._park(conversation_id, message.id)
                    if retrying:
                        break
                else:
                    with message_context(message_id=message.id, conversation_id=conversation_id,
                                         bot=message.bot, channel=message.channel,
                                         traceparent=(message.meta or {}).get("traceparent")):
                        try:
                            waiting = await self.handler.handle(message)
                        except asyncio.CancelledError:
                            if self._stopping:  # the shutdown's wait ran out; nothing else said the turn ended
                                log.warning("worker.turn_abandoned", reason="shutting down; left pending, "
                                            "answered after the restart")
                            raise
                    if waiting is not None:
                        # The customer may still be typing (a burst): the slot serves other chats meanwhile.
                        if not await self._park_burst(conversation_id, waiting):
                            continue  # a piece came in (or was edited) since the burst was read: look again now
                        self._wake_at(waiting.not_before)
                        break
        except Exception:
            await self._back_off(conversation_id)
            raise
        else:
            self._failed_drains.pop(conversation_id, None)
        finally:
            await cancel([heartbeat])
            async with self._sessions() as session, session.begin():
                # A parked lease is no longer ours: releasing it leaves it parked.
                await repo.release_lease(session, conversation_id=conversation_id, owner=self.owner)
        self._wake.set()  # more may have arrived while we held the lease

    async def _back_off(self, conversation_id: int) -> None:
        """After a drain that failed: park the conversation for a while, longer each time in a row. Why:
        a message whose turn cannot be stored (a database that refuses its text, a schema behind the
        code) was taken again at once, and every attempt paid the model again, hundreds a minute."""
        if len(self._failed_drains) >= _MAX_TRACKED_FAILURES and conversation_id not in self._failed_drains:
            # A conversation another replica drained since is never popped here: forget the oldest
            # rather than grow without end (it only starts again at the first delay).
            del self._failed_drains[next(iter(self._failed_drains))]
        failures = self._failed_drains[conversation_id] = self._failed_drains.get(conversation_id, 0) + 1
        delay = doubling(failures, first=1.0, cap=60.0)
        try:
            await self._park_until(conversation_id, utcnow() + timedelta(seconds=delay))
        except Exception:  # the database is down: nothing is claimed until it is back anyway
            return
        log.warning("worker.drain_backing_off", conversation_id=conversation_id, failures=failures, seconds=delay)

    async def _traceparent_of(self, reply: Message) -> str | None:
        """The trace of the message a reply answers (stored with it when it came in), if any."""
        if reply.reply_to_id is None:
            return None
        async with self._sessions() as session:
            inbound = await session.get(Message, reply.reply_to_id)
        return (inbound.meta or {}).get("traceparent") if inbound is not None else None

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
                                  until=_park_end(due))

    async def _park_burst(self, conversation_id: int, waiting: Burst) -> bool:
        """Park the conversation while its customer may still be typing, unless its pending messages changed
        since the burst was read; False then. Why under the row lock: a piece stored while the conversation
        was free, committed after that read but before the park, found no park to end and waited it out.
        FOR UPDATE waits for such a piece (its insert holds KEY SHARE on the row, `repo.store_inbound`), so it
        is read here; one stored after this commits reads the park under its lock, and ends it."""
        async with self._sessions() as session, session.begin():
            await session.get(Conversation, conversation_id, with_for_update=True)
            if not await unchanged(session, conversation_id, waiting.seen):
                return False
            await repo.park_lease(session, conversation_id=conversation_id, owner=self.owner, parked_owner=BURST_OWNER,
                                  until=_park_end(waiting.not_before))
        return True

    def _wake_at(self, due: datetime) -> None:
        """Look for work again at `due`, not at the next poll: a burst's answer is not held up to
        `poll_interval` after its customer paused."""
        delay = max(0.0, (as_utc(due) - utcnow()).total_seconds()) + 0.11  # past `_park_until`'s floor
        asyncio.get_running_loop().call_later(delay, self._wake.set)

    async def _requeue_if_stalled(self, reply: Message) -> bool:
        """`_requeue_stalled_sends`' rule for a reply in the conversation this worker holds: left
        `sending` for two lease periods, it was a dead replica's; back to `pending`, to send now. Why
        here too: while this worker waits for that reply it keeps the conversation leased or parked,
        so the sweep, which only takes unleased conversations, could miss it for a long time."""
        now = utcnow()
        async with self._sessions() as session, session.begin():
            requeued = await repo.requeue_stalled_send(session, message_id=reply.id, now=now,
                                                       older_than=self._stalled_after)
        if requeued:
            log.warning("outbound.requeued_from_dead_worker", count=1, message_id=reply.id)
        return requeued

    async def _wait_for_unsettled_reply(self, reply: Message) -> None:
        """Park the conversation while an earlier reply is still `sending`, looking again every poll
        interval. Why: answering the next message first would deliver its reply before that one. The
        sender is either alive (escalation and operator messages are sent outside the worker's lease)
        and done in a moment, or dead, and then `_requeue_if_stalled` (or the sweep,
        `_requeue_stalled_sends`) requeues the reply two lease periods after it started."""
        await self._park_until(reply.conversation_id, utcnow() + timedelta(seconds=self.poll_interval))
        log.info("conversation.waiting_for_unsettled_reply", conversation_id=reply.conversation_id,
                 message_id=reply.id, sending_since=str(as_utc(reply.updated_at)))

    async def _heartbeat(self, conversation_id: int) -> bool:
        """Renew the lease until cancelled; returns when it cannot, which ends the drain: True when another
        worker holds it (ours lapsed: a database outage longer than the lease, a stalled process), False
        when the conversation is gone (`gateway forget`, retention), which is no one's fault."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with self._sessions() as session, session.begin():
                    if not await repo.try_lease(session, conversation_id=conversation_id, owner=self.owner,
                                                seconds=self.lease_seconds):
                        return await session.get(Conversation, conversation_id) is not None
            except Exception:  # a database blip must not end the heartbeat: renew once it is back
                log.warning("worker.heartbeat_failed", conversation_id=conversation_id, exc_info=True)
