"""A channel whose platform is down is paused, so its failing sends do not hold the worker.

Each send to an unreachable API takes the SDK's timeouts and retries, seconds per reply, in a worker
slot. With a few hundred replies waiting for a platform that is down, every slot was busy with them,
and a web chat message to another bot waited minutes. So after `FAILURES_TO_PAUSE` sends in a row
to one (bot, channel) fail for a reason that may pass (a network error, a 5xx, not a rate limit: a
platform's wait is for one chat or method, and has its own backoff), that channel is paused: its
replies are rescheduled for the end of the pause without an attempt (none of their `max_attempts`
is spent), and sends to other channels go on. The pause starts at `FIRST_PAUSE_S` and doubles with
each pause in a row, up to `MAX_PAUSE_S`. After it one send is tried (a probe) while the others wait
`PROBE_WAIT_S` at a time: one that goes through ends the pause, one that fails starts the next. Why one:
every reply paused came due at the same moment, and each worker slot waited out the platform's
timeout again. Per process: each replica finds out for itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from gateway.backoff import doubling
from gateway.models import utcnow

log = structlog.get_logger("gateway.outbox")

FAILURES_TO_PAUSE = 5
FIRST_PAUSE_S = 5.0
MAX_PAUSE_S = 60.0
PROBE_WAIT_S = 2.0
PROBE_TIMEOUT_S = 120.0
"""A probe with no outcome after this long (its process task was cancelled) no longer holds the others."""


@dataclass(slots=True)
class _ChannelHealth:
    failures: int = 0  # in a row
    pauses: int = 0  # in a row, since the last send that went through
    paused_until: float = 0.0  # monotonic
    probe_started: float | None = None  # monotonic; a send is being tried after a pause


class SendBreaker:
    """Tracks sends per (bot, channel); `paused_until` says whether to try one now."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._health: dict[tuple[str, str], _ChannelHealth] = {}

    def paused_until(self, bot: str, channel: str) -> datetime | None:
        """When a paused channel's sends may be tried again; None when they may be tried now."""
        health = self._health.get((bot, channel))
        if health is None or not health.pauses:
            return None
        now = self._clock()
        if health.paused_until > now:
            return utcnow() + timedelta(seconds=health.paused_until - now)
        if health.probe_started is not None and now - health.probe_started < PROBE_TIMEOUT_S:
            return utcnow() + timedelta(seconds=PROBE_WAIT_S)
        health.probe_started = now  # this caller's send is the probe
        return None

    def reached(self, bot: str, channel: str) -> None:
        """The platform answered: a send went through, or was refused for a reason of its own."""
        health = self._health.pop((bot, channel), None)
        if health is not None and health.pauses:
            log.info("outbound.channel_resumed", bot=bot, channel=channel, pauses=health.pauses)

    def released(self, bot: str, channel: str) -> None:
        """A send refused without asking the platform (a removed chat, an opt-out): the pause stands, and if it
        was the probe, the next send probes at once rather than after `PROBE_TIMEOUT_S`."""
        health = self._health.get((bot, channel))
        if health is not None:
            health.probe_started = None

    def failed(self, bot: str, channel: str, error: str) -> None:
        """A send that may go through later did not (not a rate limit: module docstring)."""
        health = self._health.setdefault((bot, channel), _ChannelHealth())
        health.failures += 1
        health.probe_started = None
        if health.failures < FAILURES_TO_PAUSE or health.paused_until > self._clock():
            return  # sends already in flight when the pause began fail too; they do not lengthen it
        pause = doubling(health.pauses + 1, first=FIRST_PAUSE_S, cap=MAX_PAUSE_S)
        health.pauses += 1
        health.paused_until = self._clock() + pause
        log.warning("outbound.channel_paused", bot=bot, channel=channel, seconds=pause,
                    failures_in_a_row=health.failures, error=error)
