"""An event that can repeat without end (a loop of badly signed webhooks): its first occurrences are
logged, then one summary line a period with how many were left out. Why: every one was logged, so a
client posting in a loop filled the log (and its storage) with identical lines. Metrics still count all."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass
class _Run:
    last_seen: float
    summary_at: float
    logged: int = 0
    left_out: int = 0


class RepeatLog:
    """Per key (say bot and channel): `seen()` counts one occurrence and says whether to log it and how
    many left out to report now. A run of occurrences starts after `every_s` without one: its first `burst`
    are logged, the rest summed up once per `every_s` (the last sum with the next occurrence after the run)."""

    def __init__(self, *, burst: int = 5, every_s: float = 60.0) -> None:
        self.burst = burst
        self.every_s = every_s
        self._runs: dict[Hashable, _Run] = {}  # keys are configured bots and channels: a bounded set

    def seen(self, key: Hashable) -> tuple[bool, int]:
        """(log this one?, how many were left out since the last summary, 0 when none is due)."""
        now = time.monotonic()
        run = self._runs.get(key)
        if run is None or now - run.last_seen >= self.every_s:  # a new run: the last one's tail is told now
            tail = run.left_out if run is not None else 0
            self._runs[key] = _Run(last_seen=now, summary_at=now, logged=1)
            return True, tail
        run.last_seen = now
        if run.logged < self.burst:
            run.logged += 1
            return True, 0
        run.left_out += 1
        if now - run.summary_at < self.every_s:
            return False, 0
        told, run.left_out, run.summary_at = run.left_out, 0, now
        return False, told
