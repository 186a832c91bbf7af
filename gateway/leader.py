"""Scheduler leader election: exactly one replica runs scheduled work, through a PostgreSQL advisory lock.

The leader holds a session-level advisory lock on a connection of its own. PostgreSQL releases the lock
when that connection ends, so a replica that dies (or loses its connection) loses leadership, and the
next candidate to retry takes it. On SQLite there is only one process by design, so it always leads.

Leadership is checked again (`holds()`, one round trip) right before each scheduled job, so a replica
whose connection was cut never runs a job it no longer owns. Jobs due in the same second check at the
same moment: the lock's one connection takes one statement at a time (`_conn_lock`), or asyncpg refuses
the second ("another operation is in progress") and leadership was dropped, skipping every such job.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from gateway.background import cancel
from storage.engine import async_url, is_sqlite, postgres_connect_args

log = structlog.get_logger("gateway.leader")


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for a name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class LeaderElection:
    """Campaign for leadership of `name` in the background; `is_leader` says whether we lead now."""

    def __init__(self, database_url: str, *, name: str = "gateway-scheduler", retry_seconds: float = 5.0) -> None:
        self.name = name
        self.key = lock_key(name)
        self.retry_seconds = retry_seconds
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self._sqlite = is_sqlite(database_url)
        self._url = async_url(database_url)
        self._engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None
        self._task: asyncio.Task | None = None
        self._leader = self._sqlite
        self._conn_lock = asyncio.Lock()  # one statement at a time on the lock's connection

    @property
    def is_leader(self) -> bool:
        """Whether this process held the lock at the last check."""
        return self._leader

    async def start(self) -> None:
        """Try once now, then keep campaigning (and watching our lock) in the background."""
        if self._sqlite:
            log.info("leader.single_process", name=self.name)
            return
        # Its own connection outside the app's pool: the lock lives exactly as long as this connection.
        url, connect_args = postgres_connect_args(self._url)
        self._engine = create_async_engine(url, poolclass=NullPool, hide_parameters=True,
                                           connect_args=connect_args)
        await self.campaign()
        self._task = asyncio.create_task(self._run(), name=f"leader-{self.name}")

    async def stop(self) -> None:
        """Stop campaigning and release the lock (closing the connection releases it too)."""
        if self._task is not None:
            await cancel([self._task])
            self._task = None
        await self._drop()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def holds(self) -> bool:
        """Verify right now that we still hold the lock (a round trip on the lock's connection)."""
        if self._sqlite:
            return True
        async with self._conn_lock:
            if not self._leader or self._conn is None:
                return False
            try:
                # A session-level advisory lock lasts as long as its connection: alive connection, lock held.
                await self._conn.execute(text("SELECT 1"))
                await self._conn.commit()
            except Exception as exc:  # the connection is gone, and the lock with it
                log.warning("leader.connection_lost", name=self.name, error=type(exc).__name__)
                await self._drop()
                return False
            return True

    async def campaign(self) -> bool:
        """One attempt: take the lock if free, or confirm we still hold it. Returns `is_leader`."""
        if self._sqlite:
            return True
        if self._leader:
            return await self.holds()
        async with self._conn_lock:
            try:
                if self._conn is None:
                    self._conn = await self._engine.connect()
                got = (await self._conn.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                                {"key": self.key})).scalar_one()
                # Autocommit-like: end the implicit transaction, the session-level lock stays.
                await self._conn.commit()
            except Exception as exc:
                log.warning("leader.campaign_failed", name=self.name, error=type(exc).__name__)
                await self._drop()
                return False
        if got:
            self._leader = True
            log.info("leader.elected", name=self.name, identity=self.identity)
        return self._leader

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.retry_seconds)
            was = self._leader
            await self.campaign()
            if was and not self._leader:
                log.warning("leader.lost", name=self.name, identity=self.identity)

    async def _drop(self) -> None:
        self._leader = False
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # already broken; closing is best effort
                pass
