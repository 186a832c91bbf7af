"""Which parts of a split reply already went through, so a retried send resumes after them.

A reply longer than a platform's limit goes out as several messages, and a send can fail after some
of them landed. Each adapter keeps a `SentParts`: within `resume(message)` it appends the platform id
of every part that lands. If the send raises, the ids are kept in memory for the next attempt and
set on the error as `sent_ids`, which the outbox stores and hands back to a later attempt, perhaps
in another process, as `message.delivered_parts`. Whichever record holds more parts wins.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.models import OutboundMessage

# Unfinished replies remembered per adapter; the oldest is forgotten first (the outbox still has it).
MAX_REMEMBERED = 1024


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
    def resume(self, message: OutboundMessage) -> Iterator[list[str]]:
        """Yield the ids of the parts already delivered; the caller sends the rest, appending each id."""
        key = reply_key(message)
        sent = self._sent.pop(key, [])
        if len(sent) < len(message.delivered_parts):
            # The outbox's record is newer: another process (a restart, another replica) sent more of it.
            sent = list(message.delivered_parts)
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
