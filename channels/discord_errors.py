"""Discord's send failures in the gateway's error tree: what may be retried, what must not be resent."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import discord

from gateway.backoff import asked_wait
from gateway.errors import ChannelSendError, RecipientUnreachable

WAIT_IN_PLACE_S = 5.0
"""The longest rate limit a send waits out in place (channel messages and `/ask` follow-ups alike); a longer
one goes back to the outbox with its `retry_after`, so the worker slot serves other conversations meanwhile."""

_wait_left: ContextVar[list[float] | None] = ContextVar("discord_wait_left", default=None)


@contextlib.contextmanager
def wait_budget(seconds: float) -> Iterator[None]:
    """Within: the rate limits waited out in place count against `seconds` in all (one send's, one edit's).
    Why: discord.py waits out each 429 up to its own bound, five times over: 25 s in a worker slot."""
    token = _wait_left.set([seconds])
    try:
        yield
    finally:
        _wait_left.reset(token)


def within_wait_budget(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """An adapter method whose rate limits are waited out in place up to its `_wait_in_place_s` in all."""

    @functools.wraps(method)
    async def bounded(self: Any, *args: Any, **kwargs: Any) -> Any:
        with wait_budget(self._wait_in_place_s):
            return await method(self, *args, **kwargs)

    return bounded


def may_wait(retry_after: float) -> bool:
    """Whether a rate limit of `retry_after` s may be waited out in place, taken from the budget if so
    (outside `wait_budget`: always)."""
    left = _wait_left.get()
    if left is None:
        return True
    if retry_after > left[0]:
        return False
    left[0] -= retry_after
    return True


def outcome_unknown(exc: BaseException) -> bool:
    """A network failure after the request may have reached Discord (not a refused connection)."""
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return False  # the connection never opened: Discord saw nothing
    return isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                            aiohttp.ClientOSError))


def translate(exc: BaseException, *, sent: int = 0) -> Exception:
    """discord.py / network exceptions → the gateway's error tree. `sent`: how many chunks were delivered
    (their ids reach the outbox through `SentParts`)."""
    note = f" after {sent} chunk(s) were delivered" if sent else ""
    if isinstance(exc, discord.RateLimited):
        return ChannelSendError(f"discord rate limit{note}", retry_after=exc.retry_after, rate_limited=True)
    if isinstance(exc, (discord.Forbidden, discord.NotFound)):
        return RecipientUnreachable(f"discord {exc.status} ({exc.code}): {exc.text}{note}")
    if isinstance(exc, discord.DiscordServerError):
        return ChannelSendError(f"discord server error {exc.status}{note}")
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            retry = exc.response.headers.get("Retry-After") if exc.response is not None else None
            return ChannelSendError(f"discord 429{note}", retry_after=asked_wait(retry) if retry else None,
                                    rate_limited=True)
        return ChannelSendError(f"discord {exc.status} ({exc.code}): {exc.text}{note}", permanent=True)
    if isinstance(exc, (OSError, asyncio.TimeoutError, aiohttp.ClientError, discord.ConnectionClosed)):
        return ChannelSendError(f"discord unreachable: {exc!r}{note}")
    if isinstance(exc, (ChannelSendError, RecipientUnreachable)):
        return exc
    return ChannelSendError(f"discord send failed: {exc!r}{note}")
