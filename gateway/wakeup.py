"""Waking workers in other processes when a message is stored (PostgreSQL LISTEN/NOTIFY).

A receiver (`serve --role web`, or another replica) stores a message and wakes its own worker
directly; a worker in another process would only find it on its next poll
(`worker.poll_interval`). On PostgreSQL the inbox also sends `NOTIFY gateway_inbox` in the storing
transaction (delivered at commit), and every worker process LISTENs, so the first free worker
starts at once. Polling stays as the fallback: a lost connection costs at most one poll interval,
and SQLite (one process) needs no notification.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

log = structlog.get_logger("gateway.wakeup")

CHANNEL = "gateway_inbox"
RECONNECT_S = 5.0


async def announce(session: AsyncSession) -> None:
    """Queue a wake-up in the current transaction (PostgreSQL only; delivered when it commits)."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text(f"SELECT pg_notify('{CHANNEL}', '')"))


class InboxListener:
    """LISTEN on the inbox channel and call `wake` for every notification, reconnecting after errors."""

    def __init__(self, database_url: str, wake: Callable[[], None]) -> None:
        self.dsn = database_url.replace("postgresql+asyncpg://", "postgresql://", 1)
        self.wake = wake
        self._task: asyncio.Task | None = None

    @staticmethod
    def applies_to(database_url: str) -> bool:
        """Only PostgreSQL (through asyncpg) has LISTEN/NOTIFY."""
        return database_url.startswith("postgresql+asyncpg://")

    def start(self) -> None:
        """Listen in the background until `stop`."""
        self._task = asyncio.create_task(self._run(), name="inbox-listener")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        import asyncpg

        while True:
            connection = None
            try:
                connection = await asyncpg.connect(self.dsn)
                await connection.add_listener(CHANNEL, lambda *_: self.wake())
                log.info("wakeup.listening", channel=CHANNEL)
                self.wake()  # anything stored while we were not listening
                while not connection.is_closed():
                    await asyncio.sleep(RECONNECT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarting: poll until it is back
                log.warning("wakeup.disconnected", error=f"{type(exc).__name__}: {exc}"[:200])
            finally:
                if connection is not None and not connection.is_closed():
                    await connection.close()
            await asyncio.sleep(RECONNECT_S)
