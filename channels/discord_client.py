"""The discord.py client the Discord adapter runs: every message to the adapter, unreadable events skipped."""

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

    def __init__(self, on_message: Callable[[discord.Message], Awaitable[None]], **options: Any) -> None:
        super().__init__(**options)
        self._on_message = on_message
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


def _skipping_unreadable(event: str, parse: Any) -> Any:
    def tolerant(data: Any) -> None:
        try:
            parse(data)
        except Exception:  # a shape discord.py's models do not know: skip this one event
            log.exception("discord.event_unreadable", extra={"event": event})

    return tolerant
