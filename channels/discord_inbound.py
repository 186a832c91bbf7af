"""Gateway messages into the inbox: one at a time per channel, in the order Discord sent them, retried while
the inbox cannot store them (Discord never sends a MESSAGE_CREATE again); and whether one came in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import discord

from channels.base import Deliver
from channels.discord_errors import WAIT_IN_PLACE_S, wait_budget
from gateway.backoff import doubling
from gateway.models import InboundMessage

log = logging.getLogger("channels.discord")

DELIVER_PATIENCE = 600.0
"""Seconds a gateway message is retried into the inbox before it is logged as lost."""
LOOKUP_TIMEOUT_S = 10.0
"""The longest a channel's look-up holds the messages behind it in that channel (`InboxFeed.turn`)."""
FAILED_TTL_S = 60.0
"""How long a channel the bot may not look up (403, 404) is read as a plain channel without asking Discord
again. A look-up that failed otherwise (a timeout, a 5xx) is asked again at the next message: remembered,
a thread's messages were read as a channel's, a conversation per member, for as long."""
_KNOWN_MAX = 10_000
_FAILED_MAX = 1_000


class InboxFeed:
    """Hands gateway messages to the inbox's `deliver`, in turn and patiently."""

    def __init__(self, bot: str) -> None:
        self.bot = bot  # for the log lines
        self.deliver: Deliver | None = None  # set by the adapter's start()
        self._in_order: dict[str, tuple[asyncio.Lock, int]] = {}  # channel id → its lock, and the events at it

    @contextlib.asynccontextmanager
    async def turn(self, channel_id: int | str) -> AsyncIterator[None]:
        """Held from an event's first step to its delivery, per channel (a thread is one). Why: discord.py runs
        each event in its own task, so two messages would race into the inbox and be stored (and answered) in
        whichever order their inserts finished. The tasks start in the order Discord sent the events, and
        reach this lock before their first await: its FIFO queue keeps that order (an edit after the message
        it edits, too). Why per channel: a conversation never spans two, and with one lock for the bot, a
        thread's look-up (up to LOOKUP_TIMEOUT_S) or a message waiting out a database outage held every
        channel's messages."""
        key = str(channel_id)
        lock, users = self._in_order.get(key) or (asyncio.Lock(), 0)
        self._in_order[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._in_order[key]
            if users > 1:
                self._in_order[key] = (lock, users - 1)
            else:
                del self._in_order[key]

    async def patiently(self, result: InboundMessage) -> None:
        """Deliver `result`, retried with backoff for up to `DELIVER_PATIENCE` (the caller holds `turn`: an edit's, too)."""
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


class ThreadLookup:
    """Whether a server message came in a thread, asking Discord about a channel discord.py does not hold.

    Why: discord.py gives a message whose channel is not in its cache (a thread the bot never joined, one
    unarchived by this very message) a PartialMessageable, which reads as a plain channel: each member got
    a conversation of their own in the thread, and an operator's reply a mention of its member."""

    def __init__(self, client: discord.Client, *, bot: str = "") -> None:
        self._client = client
        self._bot = bot
        self._known: dict[int, bool] = {}  # channel id → a thread? (a channel never changes kind)
        # channel id → until when (monotonic) a failed look-up is not tried again. Why: every message in a
        # thread the bot cannot read asked again, holding the messages behind it up to LOOKUP_TIMEOUT_S.
        self._failed: dict[int, float] = {}

    async def in_thread(self, message: discord.Message) -> bool:
        """Whether `message` is in a thread; a channel that cannot be looked up counts as none (logged)."""
        return await self._is_thread(message.channel)

    async def of_channel(self, channel_id: int, guild_id: int) -> bool:
        """Whether the server channel `channel_id` is a thread (an edited message's, which names its channel)."""
        return await self._is_thread(self._client.get_channel(channel_id)
                                     or self._client.get_partial_messageable(channel_id, guild_id=guild_id))

    async def _is_thread(self, channel: Any) -> bool:
        if isinstance(channel, discord.Thread):
            return True
        if not isinstance(channel, discord.PartialMessageable) or channel.guild_id is None:
            return False  # a channel discord.py holds, or a DM
        if (known := self._known.get(channel.id)) is not None:
            return known
        if self._failed.get(channel.id, 0.0) > time.monotonic():
            return False
        try:
            with wait_budget(WAIT_IN_PLACE_S):
                fetched = await asyncio.wait_for(self._client.fetch_channel(channel.id), LOOKUP_TIMEOUT_S)
        except Exception as exc:  # no access, an outage: read as a channel, and asked again (later, if no access)
            refused = isinstance(exc, (discord.Forbidden, discord.NotFound))
            if refused:
                self._failed.pop(channel.id, None)
                if len(self._failed) >= _FAILED_MAX:  # the oldest first: they all live FAILED_TTL_S
                    del self._failed[next(iter(self._failed))]
                self._failed[channel.id] = time.monotonic() + FAILED_TTL_S
            log.warning("discord.channel_unresolved", extra={"bot": self._bot, "channel_id": channel.id,
                                                             "error": f"{type(exc).__name__}: {exc}"[:200],
                                                             "retry_in_s": FAILED_TTL_S if refused else 0})
            return False
        if len(self._known) >= _KNOWN_MAX:
            self._known.clear()
        self._known[channel.id] = isinstance(fetched, discord.Thread)
        return self._known[channel.id]
