"""Whether another process holds an embedded index's folder, told without opening the index or importing
qdrant-client (seconds to load): `gateway serve` and `gateway chat` ask it before anything heavy."""

from __future__ import annotations

import fcntl
from pathlib import Path

from gateway.settings import QdrantSettings


def folder_in_use(settings: QdrantSettings) -> bool:
    """Whether another process holds the embedded index's folder, checked without opening it (which
    loads every point in local mode). Local mode locks `<path>/.lock` and qdrant-edge `<path>/edge/.lock`,
    both with flock, so trying the same lock and letting it go at once tells. A server (`url`) is never busy."""
    if settings.url or not settings.path:
        return False
    lock = Path(settings.path) / ("edge" if settings.engine == "edge" else "") / ".lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(held, fcntl.LOCK_UN)
    return False
