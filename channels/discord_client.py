"""The discord.py client the Discord adapter runs: every message to the adapter, edits and deletions
ignored with a logged reason, unreadable events skipped."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import discord

log = logging.getLogger("channels.discord")


class GatewayClient(discord.Client):
    """A discord.Client that hands every message to `on_message` and survives events it cannot read.

    Why the parsers are wrapped: discord.py raises out of its connect loop on an event its models do not
    know (a captured embed-only MESSAGE_UPDATE has no `type`), which ended the connection for good."""

    def __init__(self, on_message: Callable[[discord.Message], Awaitable[None]], *, bot: str = "",
                 **options: Any) -> None:
        # The gateway never joins a voice channel: discord.py's "davey is not installed, voice will NOT
        # be supported" warning at every start only sent deployers looking for a package they do not need.
        discord.VoiceClient.warn_dave = False
        super().__init__(**options)
        self._on_message = on_message
        self._bot = bot  # for the log lines
        # The websocket looks each event's parser up in this dict: one unreadable event is skipped, not fatal.
        parsers = self._connection.parsers
        for event, parse in list(parsers.items()):
            parsers[event] = _skipping_unreadable(event, parse)

    async def login(self, token: str) -> None:
        """discord.py's login; a failed attempt closes the aiohttp session it opened. Why: discord.py
        opens one per attempt and leaves it open when the attempt fails, so every send or typing retry
        during an outage leaked one ("Unclosed client session"). Closing it closes its connector too,
        so the next attempt is given a fresh one."""
        try:
            await super().login(token)
        except Exception:
            with contextlib.suppress(Exception):
                await self.http.close()
            self.http.connector = discord.utils.MISSING
            raise

    async def on_message(self, message: discord.Message) -> None:
        """Gateway MESSAGE_CREATE, after discord.py has parsed it."""
        await self._on_message(message)

    # The raw events fire for every message, not only the ones discord.py still holds in its cache.
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Gateway MESSAGE_UPDATE: not answered again (the first version was), or every typo fix would be."""
        self._ignored(payload.message_id, "MESSAGE_UPDATE: edits are not answered again (the original was)")

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        """Gateway MESSAGE_DELETE: nothing to answer."""
        self._ignored(payload.message_id, "MESSAGE_DELETE: nothing to answer")

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        """Gateway MESSAGE_DELETE_BULK: nothing to answer."""
        for message_id in sorted(payload.message_ids):
            self._ignored(message_id, "MESSAGE_DELETE_BULK: nothing to answer")

    def _ignored(self, message_id: int, reason: str) -> None:
        log.info("discord.ignored", extra={"bot": self._bot, "message_id": message_id, "reason": reason})


def _skipping_unreadable(event: str, parse: Any) -> Any:
    def tolerant(data: Any) -> None:
        try:
            parse(data)
        except Exception:  # a shape discord.py's models do not know: skip this one event
            log.exception("discord.event_unreadable", extra={"event": event})

    return tolerant
