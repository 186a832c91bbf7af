"""Scheduler leader election over a PostgreSQL advisory lock; SQLite is always its own leader."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import structlog

from gateway.leader import LeaderElection, lock_key
from gateway.scheduler import IngestScheduler
from gateway.settings import Settings


@asynccontextmanager
async def two_candidates(url: str, name: str) -> AsyncIterator[tuple[LeaderElection, LeaderElection]]:
    """Two candidates for the lock `name` (retrying only after an hour), started in turn: the first leads.
    Both are stopped once the block ends, however it ends."""
    a = LeaderElection(url, name=name, retry_seconds=3600)
    b = LeaderElection(url, name=name, retry_seconds=3600)
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.stop()
        await b.stop()


async def test_leader_exactly_one_of_two_candidates_then_moves_when_its_connection_dies(postgres_url) -> None:
    async with two_candidates(postgres_url, "test-scheduler") as (a, b):
        assert (a.is_leader, b.is_leader) == (True, False)
        assert await a.holds() and not await b.holds()
        assert await b.campaign() is False  # still held by a
        # Kill the leader's session from outside, as a crashed replica or a network cut would.
        admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() "
                # Only this test's database: other databases on the server may hold advisory locks too.
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
        finally:
            await admin.close()
        assert killed == 1
        assert await a.holds() is False and a.is_leader is False
        assert await b.campaign() is True and b.is_leader
        assert await a.campaign() is False  # the old leader comes back as a follower


async def test_leader_keeps_the_lock_when_jobs_due_together_check_at_once(postgres_url) -> None:
    # Two sources on the same cron (or an ingest and retention in the same minute) call holds() at the
    # same moment on the lock's one connection: asyncpg refused the second, leadership was dropped, and
    # every such job was skipped.
    leader = LeaderElection(postgres_url, name="test-scheduler-together", retry_seconds=3600)
    await leader.start()
    try:
        assert leader.is_leader
        assert await asyncio.gather(*(leader.holds() for _ in range(5))) == [True] * 5
        assert leader.is_leader
    finally:
        await leader.stop()


async def test_leader_moves_when_the_leader_stops(postgres_url) -> None:
    async with two_candidates(postgres_url, "stop-test") as (a, b):
        assert a.is_leader and not b.is_leader
        await a.stop()
        assert await b.campaign() is True


async def test_leader_sqlite_single_process_always_leads(tmp_path) -> None:
    election = LeaderElection(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    await election.start()
    assert election.is_leader and await election.holds()
    await election.stop()


def test_leader_lock_key_is_stable_and_distinct() -> None:
    assert lock_key("gateway-scheduler") == lock_key("gateway-scheduler")
    assert lock_key("gateway-scheduler") != lock_key("other")
    assert -(2**63) <= lock_key("gateway-scheduler") < 2**63


class _Knowledge:
    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []

    async def ingest_source(self, bot: str, source: str, *, trigger: str):
        self.runs.append((bot, source))

        class _Report:
            def counts(self) -> dict:
                return {}
        return _Report()


class _Follower:
    is_leader = False

    async def holds(self) -> bool:
        return False

    async def campaign(self) -> bool:  # another replica leads
        return False


async def test_scheduler_runs_ingest_only_on_the_leader(tmp_path) -> None:
    settings = Settings(bots=[{"name": "acme", "sources": [
        {"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}])
    follower_kb, leader_kb = _Knowledge(), _Knowledge()
    sqlite_leader = LeaderElection(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    await IngestScheduler(settings, knowledge=follower_kb, leader=_Follower())._run("acme", "docs")
    await IngestScheduler(settings, knowledge=leader_kb, leader=sqlite_leader)._run("acme", "docs")
    assert follower_kb.runs == [] and leader_kb.runs == [("acme", "docs")]


async def test_a_follower_with_an_index_of_its_own_says_once_that_nobody_ingests_it(tmp_path) -> None:
    """Replicas each on a local index folder: the leader re-ingested its own, the others answered from a
    copy that drifted, silently."""
    sources = [{"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]
    local = IngestScheduler(Settings(bots=[{"name": "acme", "sources": sources}]), knowledge=_Knowledge(),
                            leader=_Follower())
    server = IngestScheduler(Settings(bots=[{"name": "acme", "sources": sources}], qdrant={"url": "http://q:6333"}),
                             knowledge=_Knowledge(), leader=_Follower())
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            await local._run("acme", "docs")
            await server._run("acme", "docs")
    warned = [e for e in logs if e["event"] == "scheduler.local_index_not_ingested"]
    assert len(warned) == 1 and warned[0]["qdrant_path"] == "var/qdrant"


async def test_a_tick_right_after_the_leader_died_runs_on_a_follower_that_takes_the_lock(postgres_url, tmp_path) -> None:
    """The follower's next campaign would come only after its retry period: it takes the free lock at
    the tick instead of skipping it (a 03:00 ingest was lost when the leader died at 02:59:58)."""
    settings = Settings(bots=[{"name": "acme", "sources": [
        {"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}])
    knowledge = _Knowledge()
    async with two_candidates(postgres_url, "tick-test") as (a, b):
        assert a.is_leader and not b.is_leader
        await a.stop()  # as a SIGKILL does: its connection, and the lock with it, is gone
        await IngestScheduler(settings, knowledge=knowledge, leader=b)._run("acme", "docs")
        assert knowledge.runs == [("acme", "docs")] and b.is_leader
