"""What the benches share to time a step: its wall and CPU seconds, and a summary of many."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Took:
    """Seconds a step took: wall clock, and this process's CPU (all its threads: less moved by the
    machine's other work than wall time). Both are set when the step ends."""

    wall_s: float = 0.0
    cpu_s: float = 0.0


@contextmanager
def timed() -> Iterator[Took]:
    """Time the block: `with timed() as took: ...`, then `took.wall_s` and `took.cpu_s`."""
    took = Took()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield took
    finally:
        took.wall_s, took.cpu_s = time.perf_counter() - wall, time.process_time() - cpu


@dataclass(frozen=True)
class Spread:
    """The median, 90th percentile (the value at index int(0.9 n) in order), least and most of n values."""

    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values) -> Spread:
        ordered = sorted(values)
        return cls(statistics.median(ordered), ordered[int(0.9 * len(ordered))], ordered[0], ordered[-1])
