"""An in-process publish/subscribe bus.

It carries progress that callers wait on (a message was answered, a token was streamed, an
escalation changed). On PostgreSQL `gateway.pg_bridge` carries events between processes too. It is
an optimisation for replies, never the source of truth: a reply waiter also polls the store.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any


class EventBus:
    """Topic → subscriber queues. Publishing never blocks: a slow subscriber drops its oldest event."""

    def __init__(self, *, max_queue: int = 1000) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self._max_queue = max_queue
        # Set by `gateway.pg_bridge.PgBridge` on PostgreSQL: also hands each event to the other processes.
        self.forwarder: Callable[[str, dict[str, Any]], None] | None = None

    def publish(self, topic: str, event: dict[str, Any], *, forward: bool = True) -> None:
        """Deliver `event` to everyone subscribed to `topic` right now, here and (`forward`) in other processes."""
        if forward and self.forwarder is not None:
            self.forwarder(topic, event)
        for queue in list(self._subscribers.get(topic, ())):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    @asynccontextmanager
    async def subscribe(self, topic: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        """A queue receiving the topic's events for the duration of the `async with`."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(self._max_queue)
        self._subscribers[topic].add(queue)
        try:
            yield queue
        finally:
            self._subscribers[topic].discard(queue)
            if not self._subscribers[topic]:
                del self._subscribers[topic]


def message_topic(message_id: int) -> str:
    """The topic of one inbound message's progress (tokens, done)."""
    return f"message:{message_id}"


def conversation_topic(conversation_id: int) -> str:
    """The topic of a conversation's new messages."""
    return f"conversation:{conversation_id}"


ESCALATIONS_TOPIC = "escalations"
