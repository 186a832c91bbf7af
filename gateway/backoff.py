"""The one backoff curve every retry here uses: the first wait, then doubling, up to a cap."""

from __future__ import annotations

import math


def doubling(n: int, *, first: float, cap: float = math.inf) -> float:
    """The `n`-th wait (1-based): `first`, 2 × `first`, 4 × `first`, …, never above `cap`."""
    return min(first * 2 ** (n - 1), cap)
