"""The one backoff curve every retry here uses (the first wait, then doubling, up to a cap), and how a
platform's asked-for wait is read."""

from __future__ import annotations

import math


def doubling(n: int, *, first: float, cap: float = math.inf) -> float:
    """The `n`-th wait (1-based): `first`, 2 × `first`, 4 × `first`, …, never above `cap`."""
    return min(first * 2 ** (n - 1), cap)


def asked_wait(value: object, *, default: float = 1.0) -> float:
    """A platform's asked-for wait (`Retry-After`, `retry_after`) in seconds: a finite number ≥ 0, else `default`.

    A header such as "soon", "inf" or "nan" is no wait to honour: "inf" would wait for ever and "nan"
    never (every comparison with it is false), so either is read as if the platform named none; so is an
    integer past what a float holds (a JSON `retry_after` of hundreds of digits), whose float() raised.
    """
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    return seconds if math.isfinite(seconds) and seconds >= 0 else default
