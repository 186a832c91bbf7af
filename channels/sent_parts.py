"""Which parts of a split reply already went through, so a retried send resumes after them.

A reply longer than a platform's limit goes out as several messages, and a send can fail after some
of them landed. Each adapter keeps a `SentParts`: within `resume(message)` it appends the platform id
of every part that lands. If the send raises, the ids are kept in memory for the next attempt and
set on the error as `sent_ids`, which the outbox stores and hands back to a later attempt, perhaps
in another process, as `message.delivered_parts`. Whichever record holds more parts wins.

A process killed between two parts raises nothing. So each part that lands before another is sent goes
to `record_landed`, which the outbox sets around a send to store the ids with the reply at once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gateway.models import OutboundMessage

# Unfinished replies remembered per adapter; the oldest is forgotten first (the outbox still has it).
MAX_REMEMBERED = 1024

record_landed: ContextVar[Callable[[list[str]], Awaitable[None]] | None] = ContextVar("record_landed", default=None)
"""Stores the ids of the parts landed so far with the reply being sent (set by the outbox around a send)."""


class Landed(list):
    """The platform ids of a reply's delivered parts, in order."""

    async def add(self, part_id: str, *, more: bool) -> None:
        """Append a part that landed; with `more` parts still to send, have it stored before they go."""
        self.append(part_id)
        record = record_landed.get()
        if more and record is not None:
            await record(list(self))


def reply_key(message: OutboundMessage) -> str:
    """The same for every attempt of one reply and different for any other reply."""
    conv = message.conversation
    blob = repr((message.idempotency_key, conv.chat, conv.thread, message.text, message.citations, message.reply_to))
    return hashlib.sha256(blob.encode()).hexdigest()


class SentParts:
    """Platform ids of the delivered parts of each reply whose send failed part-way."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._sent: OrderedDict[str, list[str]] = OrderedDict()

    @contextmanager
    def resume(self, message: OutboundMessage) -> Iterator[Landed]:
        """Yield the ids of the parts already delivered; the caller sends the rest, adding each id."""
        key = reply_key(message)
        sent = Landed(self._sent.pop(key, []))
        if len(sent) < len(message.delivered_parts):
            # The outbox's record is newer: another process (a restart, another replica) sent more of it.
            sent = Landed(message.delivered_parts)
        try:
            yield sent
        except BaseException as exc:  # a cancelled send too: what landed, landed
            exc.sent_ids = list(sent)  # type: ignore[attr-defined]
            if sent:
                self._sent[key] = sent
                while len(self._sent) > self.limit:
                    self._sent.popitem(last=False)
            raise

    def __len__(self) -> int:
        return len(self._sent)
