"""Background tasks something must wait for at shutdown, within a bound."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable


async def settle(tasks: Collection[asyncio.Task], *, timeout: float | None = None) -> list[asyncio.Task]:
    """Wait until `tasks` (a live set or dict, which finished tasks leave and new ones may join) is empty,
    or `timeout` has passed; returns the tasks still running then."""
    deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
    while tasks:
        left = None if deadline is None else deadline - asyncio.get_running_loop().time()
        if left is not None and left <= 0:
            break
        await asyncio.wait(list(tasks), timeout=left)
    return [task for task in list(tasks) if not task.done()]


async def cancel(tasks: Iterable[asyncio.Task]) -> None:
    """Cancel `tasks` and wait until they have ended."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
