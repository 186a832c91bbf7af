"""Signals between gateway processes on PostgreSQL (LISTEN/NOTIFY): inbox wake-ups and bus events.

- Wake-ups: a receiver (`serve --role web`, or another replica) stores a message and wakes its own
  worker directly; a worker in another process would only find it on its next poll
  (`worker.poll_interval`). The inbox sends `NOTIFY gateway_inbox` in the storing transaction
  (delivered at commit) and every worker process LISTENs, so the first free worker starts at once.
- Bus events: the in-process `EventBus` carries "answered", streamed tokens and "escalation
  opened/claimed/…" to the web chat and the operator console's live stream. Each event is also sent
  on `gateway_events` (tokens waiting together joined into one), and every other process
  republishes it on its own bus, so an operator connected to one replica sees an escalation opened
  on another, and a web chat served by one process streams the answer another one writes.

Polling stays the fallback everywhere: a lost connection costs at most one poll interval, and
SQLite (one process) needs none of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.background import cancel
from gateway.events import EventBus
from storage.engine import async_url, asyncpg_dsn

log = structlog.get_logger("gateway.pg_bridge")

INBOX_CHANNEL = "gateway_inbox"
EVENTS_CHANNEL = "gateway_events"
MAX_PAYLOAD = 7900  # PostgreSQL refuses NOTIFY payloads of 8000 bytes and more
TOKEN_BATCH_CHARS = 1500  # streamed tokens waiting together go as one NOTIFY (≤ 6 kB of UTF-8)
NOTIFY_BATCH = 100  # events waiting together go in one transaction, at most this many
RECONNECT_S = 5.0
SHORT_VALUE = 200  # an event's texts up to this many characters are never cut to fit a NOTIFY
REMEMBERED_ORIGINS = 1000  # processes whose last event number is kept (each start is a new one)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


async def announce(session: AsyncSession) -> None:
    """Queue a wake-up in the current transaction (PostgreSQL only; delivered when it commits)."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text(f"SELECT pg_notify('{INBOX_CHANNEL}', '')"))


class PgBridge:
    """LISTEN for wake-ups and other processes' bus events; NOTIFY this process's bus events."""

    def __init__(self, database_url: str, *, sessions: async_sessionmaker[AsyncSession], bus: EventBus,
                 wake: Callable[[], None] | None) -> None:
        self.dsn, self.connect_args = asyncpg_dsn(database_url)
        self.sessions = sessions
        self.bus = bus
        self.wake = wake
        self.origin = uuid.uuid4().hex  # this process: its own events come back and are skipped
        # Numbers each payload: PostgreSQL delivers only one of a transaction's identical NOTIFYs, and a
        # batch may hold two equal events ("message" twice for one conversation, a repeated token).
        self._sequence = itertools.count()
        self._outgoing: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(maxsize=10_000)
        self._tasks: list[asyncio.Task] = []
        self._heard: OrderedDict[str, int] = OrderedDict()  # each other process: the last `n` republished

    @staticmethod
    def applies_to(database_url: str) -> bool:
        """Only PostgreSQL has LISTEN/NOTIFY (any spelling of its URL; the gateway drives it with asyncpg)."""
        return make_url(async_url(database_url)).drivername == "postgresql+asyncpg"

    def start(self) -> None:
        """Listen and forward in the background until `stop`."""
        self.bus.forwarder = self._forward
        self._tasks = [asyncio.create_task(self._listen(), name="pg-bridge-listen"),
                       asyncio.create_task(self._send(), name="pg-bridge-send")]

    async def stop(self) -> None:
        """Stop both loops and close the connection."""
        self.bus.forwarder = None
        await cancel(self._tasks)
        self._tasks = []

    def _forward(self, topic: str, event: dict[str, Any]) -> None:
        try:
            self._outgoing.put_nowait((topic, event))
        except asyncio.QueueFull:  # the database is away; waiters poll the store meanwhile
            log.warning("pg_bridge.dropped", topic=topic)

    async def _send(self) -> None:
        """NOTIFY each outgoing event, in order. The events already waiting go in one transaction (a turn
        publishes two or three at once, and each was BEGIN, NOTIFY and COMMIT of its own: three round trips
        an event); streamed tokens already waiting for the same topic are joined into one."""
        carry: tuple[str, dict[str, Any]] | None = None
        while True:
            batch: list[tuple[str, dict[str, Any]]] = []
            while True:
                if carry is not None:
                    item, carry = carry, None
                elif not batch:
                    item = await self._outgoing.get()
                elif not self._outgoing.empty() and len(batch) < NOTIFY_BATCH:
                    item = self._outgoing.get_nowait()
                else:
                    break
                item, carry = self._joined(item)
                batch.append(item)
            await self._notify(batch)

    def _joined(self, item: tuple[str, dict[str, Any]]) -> tuple[tuple[str, dict[str, Any]], tuple | None]:
        """A token event with the tokens for its topic waiting right behind it, and the first other event
        taken off the queue meanwhile (None when there was none)."""
        topic, event = item
        if event.get("type") != "token":
            return item, None
        text, carry = str(event.get("text", "")), None
        while len(text) < TOKEN_BATCH_CHARS and not self._outgoing.empty():
            next_topic, next_event = self._outgoing.get_nowait()
            if next_topic == topic and next_event.get("type") == "token":
                text += str(next_event.get("text", ""))
            else:
                carry = (next_topic, next_event)
                break
        return (topic, {**event, "text": text}), carry

    async def _notify(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        payloads = []
        for topic, event in batch:
            sequence = next(self._sequence)
            payload = self._payload(sequence, topic, event)
            if len(payload.encode()) > MAX_PAYLOAD:
                # A long customer message or reply (an escalation's `text`) was dropped whole, and no console
                # of another replica heard of it. The event still goes, its longest texts cut: listeners
                # read the escalation from the store on an event, and `truncated` says this one is partial.
                log.warning("pg_bridge.too_large", topic=topic, size=len(payload.encode()))
                payload = self._payload(sequence, topic, _cut_to_fit(event, len(payload.encode()) - MAX_PAYLOAD))
                if len(payload.encode()) > MAX_PAYLOAD:
                    continue
            payloads.append(payload)
        if not payloads:
            return
        for attempt in (1, 2):
            try:
                async with self.sessions() as session, session.begin():
                    for payload in payloads:  # delivered at the commit, in this order
                        await session.execute(text("SELECT pg_notify(:channel, :payload)"),
                                              {"channel": EVENTS_CHANNEL, "payload": payload})
                return
            except Exception as exc:  # never take the process down; waiters poll the store
                error = f"{type(exc).__name__}: {exc}"[:200]
                if attempt == 1:
                    # A connection dropped mid-transaction (a restart, a failover, a killed backend) delivered
                    # none of the batch, and it was lost. Sent again on another connection of the pool: should
                    # the first commit have landed unacknowledged, listeners skip what they already had (`n`).
                    log.info("pg_bridge.notify_retried", events=len(payloads), error=error)
                    continue
                log.warning("pg_bridge.notify_failed", events_lost=len(payloads), error=error)

    def _payload(self, sequence: int, topic: str, event: dict[str, Any]) -> str:
        message = {"o": self.origin, "n": sequence, "t": topic, "e": event}
        # Half an emoji (a model streams an emoji's two surrogates in two chunks) has no UTF-8 form, and
        # its encoding killed this task: it goes escaped, as JSON allows, and arrives as it was sent.
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                                   json.dumps(message, default=str, ensure_ascii=False))

    def _received(self, _connection: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == INBOX_CHANNEL:
            if self.wake is not None:
                self.wake()
            return
        try:
            message = json.loads(payload)
        except ValueError:
            return
        origin, sequence = message.get("o"), message.get("n")
        if origin == self.origin:
            return
        if isinstance(sequence, int):
            # A batch sent again after a failed commit that had in fact landed: its events came already.
            if sequence <= self._heard.get(origin, -1):
                return
            self._heard[origin] = sequence
            self._heard.move_to_end(origin)
            while len(self._heard) > REMEMBERED_ORIGINS:
                self._heard.popitem(last=False)
        self.bus.publish(message["t"], message["e"], forward=False)

    async def _listen(self) -> None:
        import asyncpg

        while True:
            connection = None
            try:
                connection = await asyncpg.connect(self.dsn, **self.connect_args)
                for channel in (INBOX_CHANNEL, EVENTS_CHANNEL):
                    await connection.add_listener(channel, self._received)
                log.info("pg_bridge.listening")
                if self.wake is not None:
                    self.wake()  # anything stored while we were not listening
                while True:
                    await asyncio.sleep(RECONNECT_S)
                    # Asked, not only checked for closed: a failover or a partition can leave the socket
                    # open and silent, and it was listened to forever while nothing more arrived.
                    await asyncio.wait_for(connection.fetchval("SELECT 1"), timeout=RECONNECT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarting, or gone silent: poll until it is back
                log.warning("pg_bridge.disconnected", error=f"{type(exc).__name__}: {exc}"[:200])
            finally:
                if connection is not None and not connection.is_closed():
                    try:  # a silent peer never answers the goodbye: drop the socket then
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(connection.close(), timeout=RECONNECT_S)
                    finally:
                        if not connection.is_closed():
                            connection.terminate()
            await asyncio.sleep(RECONNECT_S)


def _cut_to_fit(event: dict[str, Any], excess: int) -> dict[str, Any]:
    """`event` with its longest texts shorter by `excess` bytes of UTF-8 in all (a payload's JSON holds each
    character in as many bytes or more), marked `truncated`. Short values (its type, ids, names) stay whole."""
    event, excess = {**event, "truncated": True}, excess + len(', "truncated": true')
    while excess > 0:
        longest = max((k for k, v in event.items() if isinstance(v, str) and len(v) > SHORT_VALUE),
                      key=lambda k: len(event[k]), default=None)
        if longest is None:
            break
        encoded = event[longest].encode("utf-8", "surrogatepass")
        event[longest] = encoded[:max(SHORT_VALUE, len(encoded) - excess)].decode("utf-8", "ignore")
        excess -= len(encoded) - len(event[longest].encode("utf-8", "surrogatepass"))
    return event
