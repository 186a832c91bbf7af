"""Gateway messages into the inbox: one at a time, in the order Discord sent them, retried while the
inbox cannot store them (Discord never sends a MESSAGE_CREATE again)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator

from channels.base import Deliver
from gateway.backoff import doubling
from gateway.models import InboundMessage

log = logging.getLogger("channels.discord")

DELIVER_PATIENCE = 600.0
"""Seconds a gateway message is retried into the inbox before it is logged as lost."""


class InboxFeed:
    """Hands gateway messages to the inbox's `deliver`, in turn and patiently."""

    def __init__(self, bot: str) -> None:
        self.bot = bot  # for the log lines
        self.deliver: Deliver | None = None  # set by the adapter's start()
        self._in_order = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Held from an event's first step to its delivery. Why: discord.py runs each event in its own task,
        so two messages would race into the inbox and be stored (and answered) in whichever order their
        inserts finished. The tasks start in the order Discord sent the events, and reach this lock before
        their first await: its FIFO queue keeps that order (an edit after the message it edits, too)."""
        async with self._in_order:
            yield

    async def in_turn(self, result: InboundMessage) -> None:
        """Deliver `result` after the events before it."""
        async with self.turn():
            await self.patiently(result)

    async def patiently(self, result: InboundMessage) -> None:
        """Deliver `result`, retried with backoff for up to `DELIVER_PATIENCE` (the caller holds `turn`)."""
        message_id = result.revises or result.external_id
        if self.deliver is None:
            log.warning("discord.undelivered", extra={"bot": self.bot, "message_id": message_id})
            return
        deadline = time.monotonic() + DELIVER_PATIENCE
        for attempt in itertools.count(1):
            try:
                await self.deliver(result)
                return
            except Exception:  # the database is away: Discord will not send this message again
                if time.monotonic() >= deadline:
                    log.exception("discord.deliver_failed", extra={"bot": self.bot, "message_id": message_id,
                                                                   "attempts": attempt})
                    return
                log.warning("discord.deliver_retry", extra={"bot": self.bot, "message_id": message_id,
                                                            "attempt": attempt}, exc_info=True)
                await asyncio.sleep(doubling(attempt, first=0.5, cap=30.0))
