"""Discord's gateway connection, kept up: discord.py's connect loop, run again with backoff whenever an error
ends it, and what `/readyz` says of it.

A rejected token, or a close code no retry fixes (4004 bad token, 4010-4013 bad shard or intents), stops it
for good, said in `/readyz`; anything else (Discord unreachable, a dropped socket) is retried after 2 s,
doubling to 60 s, the count of failures starting again once a connection held a minute.

4014, the Message Content Intent requested but not enabled in the Developer Portal, is retried the same way
(turned on there, the next try connects, with no restart), each try one line naming the intent and where to turn
it on (`discord.message_content_intent_missing`), also what `/readyz` says. Why: discord.py raises it as
PrivilegedIntentsRequired without closing the client, and it was `discord.gateway_failed` with a traceback on every
try, its text naming neither the intent nor this bot, and advising to stop requesting privileged intents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import discord

from gateway.backoff import doubling
from gateway.errors import ChannelSendError

log = logging.getLogger("channels.discord")  # the adapter's log: its events are the adapter's

INTENT_MISSING = ("Discord closed the gateway (4014): the Message Content Intent is not enabled for this bot's "
                  "application; turn it on in the Developer Portal (Bot → Privileged Gateway Intents → Message "
                  "Content Intent), and the next try connects")


class GatewayConnection:
    """Runs `client`'s gateway connection until it is closed on purpose (`stopping`) or for good."""

    def __init__(self, client: discord.Client, login: Callable[[], Awaitable[None]], *, bot: str) -> None:
        self._client = client
        self._login = login  # the adapter's: at once when logged in
        self._bot = bot
        self.problem: str | None = None  # why the connection is down, while it is
        self.stopping = False

    def status(self, task: asyncio.Task[None] | None) -> str:
        """For `/readyz`: not started, connecting, connected, reconnecting after an error, or stopped (by
        `stop()`, or by Discord: a rejected token or intents). `task` runs `run()`."""
        if task is None:
            return "not started"
        if self.problem is not None:
            return self.problem
        if self._client.is_closed() or task.done():
            return "stopped"
        return "connected" if self._client.is_ready() else "connecting"

    async def run(self) -> None:
        """discord.py's connect loop, started again (with backoff) whenever an error ends it."""
        failures = 0
        while not self._client.is_closed():
            started = time.monotonic()
            try:
                await self._login()  # at once when logged in; start() may have failed to
                await self._client.connect(reconnect=True)
                return  # closed on purpose
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.stopping:
                    return
                login = isinstance(exc, ChannelSendError)  # the login's: Discord unreachable, or the token
                if self._client.is_closed() or (login and exc.permanent):
                    # A rejected token, or discord.py closed the client itself: a fatal close code that no
                    # retry fixes.
                    self.problem = f"stopped by Discord: {type(exc).__name__}: {exc}"[:200]
                    log.error("discord.gateway_stopped", extra={"bot": self._bot, "error": self.problem})
                    return
                failures = 1 if time.monotonic() - started > 60 else failures + 1
                if isinstance(exc, discord.PrivilegedIntentsRequired):  # 4014: fixed in the portal, no restart
                    self.problem = INTENT_MISSING
                    log.error("discord.message_content_intent_missing", extra={
                        "bot": self._bot, "error": INTENT_MISSING, "failures": failures})
                    await self._retry_after(failures)
                    continue
                # With what went wrong: /readyz showed only "ChannelSendError", the detail was in the log alone.
                self.problem = (f"{'logging in again' if login else 'reconnecting'} after "
                                f"{type(exc).__name__}: {exc}")[:200]
                if login:  # an outage, said in one line: the traceback would show only our own frames
                    log.warning("discord.login_failed", extra={"bot": self._bot, "error": str(exc)[:200],
                                                               "failures": failures})
                else:
                    log.exception("discord.gateway_failed", extra={"bot": self._bot, "failures": failures})
                await self._retry_after(failures)

    async def _retry_after(self, failures: int) -> None:
        """Close the socket the loop left open, and wait before the next try."""
        if self._client.ws is not None:  # the loop ended but left its socket open
            with contextlib.suppress(Exception):
                await self._client.ws.close(code=1000)
        await asyncio.sleep(doubling(failures, first=2.0, cap=60.0))
        self.problem = None
