"""A failure that repeats (a database or Redis away): logged at most once per period, and its end once.
Why: logged on every poll or every message, a one-minute outage buried the log in identical lines."""

from __future__ import annotations

import time


class OutageLog:
    """When to log a repeated failure. `failed()` says whether this one is due (the first, then one per
    `every_s`; a success between does not reset the clock, so a flapping service is logged as one
    outage); `recovered()` gives, once, how long it has been since the first failure logged, when a
    success follows one (an unlogged failure has no "back" line either)."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.since: float | None = None  # when the current outage's first logged failure was
        self._told: float | None = None  # when a failure was last logged

    def failed(self) -> bool:
        """Count a failure; True when it is to be logged."""
        now = time.monotonic()
        if self._told is None or now - self._told >= self.every_s:
            self._told = now
            if self.since is None:
                self.since = now
            return True
        return False

    def recovered(self) -> float | None:
        """The seconds the outage lasted when one ends now (log it), else None."""
        if self.since is None:
            return None
        down, self.since = time.monotonic() - self.since, None
        return down
