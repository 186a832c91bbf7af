"""An in-flight send's heartbeat: its `sending` row's `updated_at`, refreshed while the send runs.

A `sending` row that has not moved for two lease periods is taken for a dead replica's and requeued
(`Worker._requeue_stalled_sends`, `Outbox.recover`); a send the platform holds (a flood wait, a slow API) is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import utcnow
from storage.models import Message


@contextlib.asynccontextmanager
async def sending_heartbeat(sessions: async_sessionmaker[AsyncSession], message_id: int, *, every_s: float,
                            bound) -> AsyncIterator[None]:
    """Refresh the `sending` row's `updated_at` every `every_s` while the body runs."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                async with sessions() as session, session.begin():
                    await session.execute(
                        update(Message).where(Message.id == message_id, Message.status == "sending")
                        .values(updated_at=utcnow()).execution_options(synchronize_session=False))
            except Exception as exc:  # a database blip: the next beat tries again
                bound.warning("outbound.heartbeat_failed", error=type(exc).__name__)

    task = asyncio.create_task(beat(), name=f"outbox-heartbeat-{message_id}")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
