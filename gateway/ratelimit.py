"""Rate limits per contact and per bot (messages per minute), and per client address on the web
chat, with the `limits` package.

Counters live in Redis when `redis_url` is set, so every replica shares them; otherwise in this
process. The worker asks before the pipeline runs: over the limit, the message stays stored, no
model is called, and the contact gets the bot's notice once per window (a third counter with a limit
of one per minute makes "once" hold across replicas too).

A rate limiter outage never loses or holds a customer's message: when the storage fails or does not
answer within `timeout`, the check fails open (the message is let through uncounted), the failure is
counted in `gateway_ratelimit_errors_total`, and `ratelimit.unavailable` is logged once per
`LOG_EVERY_S`, not once per message. Time this process's own event loop was held by other work does
not count against `timeout` (`_answer`): Redis' answer is waited for once more rather than the
storage reported unavailable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from limits import RateLimitItemPerMinute
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from gateway.errors import ConfigError
from gateway.observability.outage import OutageLog
from gateway.settings import RateLimitSettings, Settings

log = structlog.get_logger("gateway.ratelimit")
T = TypeVar("T")

_NOTICES_PER_WINDOW = RateLimitItemPerMinute(1)
# A local or same-network Redis answers in milliseconds; past this the message goes on uncounted.
TIMEOUT_S = 0.5
LOCAL_STALL_S = 0.1  # a deadline timer that fires this late means our own loop was held, not Redis slow
LOG_EVERY_S = 60.0  # one `ratelimit.unavailable` line per minute of outage, whatever the message rate


@dataclass(frozen=True, slots=True)
class Decision:
    """`allowed`: answer normally. Otherwise `notify` says whether this message gets the notice."""

    allowed: bool
    notify: bool = False
    scope: str | None = None  # "contact" or "bot" when refused


def storage_uri(redis_url: str | None) -> str:
    """The `limits` storage for a redis URL (async Redis) or none (async memory)."""
    if not redis_url:
        return "async+memory://"
    scheme, sep, rest = redis_url.partition("://")
    if not sep or scheme not in ("redis", "rediss", "redis+unix"):
        raise ValueError(f"redis_url must start with redis:// or rediss://, got {scheme!r}")
    return f"async+{scheme}://{rest}"


class RateLimiter:
    """Checks and counts one message against its contact's and its bot's per-minute limits."""

    def __init__(self, limits_by_bot: dict[str, RateLimitSettings], *, redis_url: str | None = None,
                 namespace: str = "gw", timeout: float = TIMEOUT_S, metrics=None) -> None:
        self._limits = limits_by_bot
        self.timeout = timeout
        self.metrics = metrics  # gateway.observability.metrics.Metrics, for gateway_ratelimit_errors_total
        self._outage = OutageLog(LOG_EVERY_S)  # `ratelimit.unavailable` once a minute, `ratelimit.recovered` once
        try:
            self._storage = storage_from_string(storage_uri(redis_url))
        except ConfigurationError as exc:  # e.g. the Redis client library is not installed
            raise ConfigError("redis_url", f"rate limit storage unavailable: {exc}") from None
        self._strategy = FixedWindowRateLimiter(self._storage)
        self._ns = namespace
        self.backend = "redis" if redis_url else "memory"

    @classmethod
    def from_settings(cls, settings: Settings, *, metrics=None) -> "RateLimiter":
        """One limiter for every bot of the config."""
        return cls({bot.name: bot.rate_limit for bot in settings.bots}, redis_url=settings.redis_url, metrics=metrics)

    def enabled_for(self, bot: str) -> bool:
        """Whether the bot has any limit at all (no limit: no counter round trips)."""
        config = self._limits.get(bot)
        return bool(config and (config.per_contact_per_minute or config.per_bot_per_minute))

    async def check(self, *, bot: str, channel: str, contact: str) -> Decision:
        """Count this message; refuse it when a limit is exceeded. Allowed when the storage fails."""
        config = self._limits.get(bot)
        if config is None or not self.enabled_for(bot):
            return Decision(allowed=True)
        try:
            decision = await self._answer(self._check(config, bot=bot, channel=channel, contact=contact))
        except Exception as exc:
            self._unavailable(exc, bot=bot)
            return Decision(allowed=True)
        self._available()
        return decision

    async def _check(self, config: RateLimitSettings, *, bot: str, channel: str, contact: str) -> Decision:
        scope = None
        if config.per_contact_per_minute and not await self._strategy.hit(
                RateLimitItemPerMinute(config.per_contact_per_minute), self._ns, "contact", bot, channel, contact):
            scope = "contact"
        # A contact already over its own limit does not use up the bot's budget for everyone else.
        if scope is None and config.per_bot_per_minute and not await self._strategy.hit(
                RateLimitItemPerMinute(config.per_bot_per_minute), self._ns, "bot", bot):
            scope = "bot"
        if scope is None:
            return Decision(allowed=True)
        notify = await self._strategy.hit(_NOTICES_PER_WINDOW, self._ns, "notice", bot, channel, contact)
        log.info("ratelimit.refused", bot=bot, channel=channel, scope=scope, notify=notify)
        return Decision(allowed=False, notify=notify, scope=scope)

    async def allow_address(self, *, bot: str, address: str, per_minute: int) -> bool:
        """Count one web chat message from a client address; False once it is over `per_minute`. The
        web chat's contact is a session id the caller chooses, so only the address bounds a caller.
        True when the storage fails."""
        try:
            allowed = await self._answer(
                self._strategy.hit(RateLimitItemPerMinute(per_minute), self._ns, "address", bot, address))
        except Exception as exc:
            self._unavailable(exc, bot=bot)
            return True
        self._available()
        return allowed

    async def allow_read(self, *, bot: str, session: str, address: str, per_session: int | None,
                         per_address: int | None) -> float | None:
        """Count one read of a web chat session's answers (a transcript GET, a retry of a stored message);
        None when allowed, else the seconds until the window that refused it ends (for `Retry-After`).
        A session over its own limit is not counted against its address. None when the storage fails."""
        try:
            wait = await self._answer(self._read(bot, session, address, per_session, per_address))
        except Exception as exc:
            self._unavailable(exc, bot=bot)
            return None
        self._available()
        return wait

    async def _read(self, bot: str, session: str, address: str, per_session: int | None,
                    per_address: int | None) -> float | None:
        for limit, keys in ((per_session, ("read-session", bot, session)), (per_address, ("read-address", bot, address))):
            if not limit:
                continue
            item = RateLimitItemPerMinute(limit)
            if not await self._strategy.hit(item, self._ns, *keys):
                stats = await self._strategy.get_window_stats(item, self._ns, *keys)
                return max(1.0, stats.reset_time - time.time())
        return None

    async def ping(self) -> None:
        """Raise when the counter storage does not answer within the timeout (for /readyz)."""
        await self._answer(self._storage.get(f"{self._ns}/ping"))  # a plain read: raises as the client does

    async def check_at_start(self) -> None:
        """Ask the Redis once as the server starts, so one that is down is said then (`ratelimit.unavailable`,
        `at: start`), not at the first message's check; a warning, not a failure, as every check fails open. The
        first checks of the same outage are not logged again (`LOG_EVERY_S`); an answer later logs it back."""
        if self.backend != "redis":
            return
        try:
            await self.ping()
        except Exception as exc:
            if self._outage.failed():
                self._log_unavailable(exc, at="start")

    async def _answer(self, call: Awaitable[T]) -> T:
        """`call`'s result; TimeoutError when the storage has not answered within `timeout`. Why not
        `asyncio.timeout`: when other work held this process's event loop past the deadline (a turn's
        first model call took 2 s on the loop), the timer fired as the loop woke, before the answer that
        had arrived meanwhile was read, and a healthy Redis was logged `ratelimit.unavailable`. A deadline
        reached that late waits once more (at most twice), so only the storage's own slowness counts."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(call)
        try:
            for _ in range(3):
                asked = loop.time()
                await asyncio.wait({task}, timeout=self.timeout)
                if task.done():
                    return task.result()
                if loop.time() - asked - self.timeout < LOCAL_STALL_S:  # on time: the storage is slow
                    break
            raise TimeoutError(f"the rate limit storage did not answer within {self.timeout} s")
        finally:
            task.cancel()  # a no-op once done; else the call is abandoned, as asyncio.timeout did

    def _unavailable(self, exc: Exception, *, bot: str) -> None:
        """Count a check that failed open; log it at most once per LOG_EVERY_S, also while the storage
        flaps (fails one call, answers the next): a success does not reset the clock."""
        if self.metrics is not None:
            self.metrics.ratelimit_errors.inc()
        if self._outage.failed():
            self._log_unavailable(exc, bot=bot)

    def _log_unavailable(self, exc: Exception, **where: str) -> None:
        log.warning("ratelimit.unavailable", backend=self.backend, **where, error=type(exc).__name__,
                    detail=str(exc)[:200], action="messages pass uncounted until the storage answers")

    def _available(self) -> None:
        """After a logged outage, say once that the storage answers again."""
        if self._outage.recovered() is not None:
            log.info("ratelimit.recovered", backend=self.backend)

    def notice(self, bot: str) -> str:
        """The polite text sent once per window to a contact over the limit."""
        config = self._limits.get(bot)
        return config.notice if config else RateLimitSettings().notice

    async def reset(self) -> None:
        """Forget every counter (tests, and an operator clearing a false alarm)."""
        await self._storage.reset()
