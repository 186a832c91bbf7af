"""`gateway forget` and the retention job at once on the stored Slack operator threads (`purged_operator_threads`):
each updates (or drops) the rows of the threads it tried, in one transaction, and the two must not deadlock."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy import select, update
from structlog.testing import capture_logs

from gateway.operators import slack_purged
from gateway.operators.slack_forget import OperatorThread
from gateway.operators.slack_purged import (
    OPERATOR_THREAD_ATTEMPTS,
    erase_forgotten_threads,
    erase_purged_threads,
    keep_purged_threads,
)
from gateway.settings import load_settings
from storage.engine import create_engine, session_factory
from storage.models import PurgedOperatorThread
from tests.conftest import write_config
from tests.pausing import pausing_sessions


async def test_forget_and_the_retention_job_record_their_attempts_at_the_same_threads_at_once(migrated_url, tmp_path):
    """Each took the rows' locks in its own order (forget: its escalations'; the job: the fewest attempts first),
    so on PostgreSQL a forget whose attempt ended as the job's did deadlocked with it: one of them failed, a
    forget after its commit with a traceback and no counts printed."""
    engine = create_engine(migrated_url)
    try:
        threads = [OperatorThread("acme", "COPS", ts) for ts in ("1700000000.000100", "1700000000.000200")]
        async with session_factory(engine)() as session, session.begin():
            await keep_purged_threads(session, threads)
        # The bot's Slack is gone from the config: each attempt is left at once, and its row updated.
        settings = load_settings(write_config(tmp_path, database_url=migrated_url,
                                              bots=[{"name": "acme", "channels": {"web": {}}}]))
        arrived, both = [], asyncio.Event()

        def meet():
            async def pause() -> None:  # each holds its first row until the other holds one too (or 3 s passed)
                arrived.append(1)
                if len(arrived) == 2:
                    both.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(both.wait(), 3)
            return pause

        def sessions():
            return pausing_sessions(engine, meet(), after_locking="purged_operator_threads")

        forgot, _ = await asyncio.wait_for(asyncio.gather(
            erase_forgotten_threads(sessions(), settings, threads[::-1]),  # in its escalations' order
            erase_purged_threads(sessions(), settings)), 60)
        assert sorted(thread.ts for thread, _ in forgot) == [t.ts for t in threads]
        async with session_factory(engine)() as session:
            rows = (await session.scalars(select(PurgedOperatorThread).order_by(PurgedOperatorThread.ts))).all()
        assert [(row.ts, row.why) for row in rows] == [(t.ts, "the bot has no Slack token in the config")
                                                        for t in threads]
    finally:
        await engine.dispose()


async def test_two_attempts_at_a_thread_at_once_are_counted_as_two(migrated_url, tmp_path, monkeypatch):
    """The job read a thread's attempts before asking Slack and wrote that count plus one after; `gateway forget`
    did the same from 0: a forget's attempt made while the job waited for Slack was counted once for both, so a
    thread Slack refuses was tried more times than `OPERATOR_THREAD_ATTEMPTS` said."""
    engine = create_engine(migrated_url)
    try:
        sessions, thread = session_factory(engine), OperatorThread("acme", "COPS", "1700000000.000100")
        async with sessions() as session, session.begin():
            await keep_purged_threads(session, [thread])
        settings = load_settings(write_config(tmp_path, database_url=migrated_url,
                                              bots=[{"name": "acme", "channels": {"web": {}}}]))
        real = slack_purged.erase_operator_threads

        async def forget_meanwhile(settings, threads):  # while the job waits for Slack, forget tries the thread
            monkeypatch.setattr(slack_purged, "erase_operator_threads", real)
            await erase_forgotten_threads(sessions, settings, threads)
            return await real(settings, threads)

        monkeypatch.setattr(slack_purged, "erase_operator_threads", forget_meanwhile)
        with capture_logs() as logs:
            await erase_purged_threads(sessions, settings)
        async with sessions() as session:
            assert (await session.scalars(select(PurgedOperatorThread.attempts))).all() == [2]
        assert [e["attempt"] for e in logs if e["event"] == "retention.operator_thread_left"] == [1, 2]
    finally:
        await engine.dispose()


async def test_an_attempt_at_a_thread_another_dropped_meanwhile_is_logged_and_not_said_to_be_tried_again(
        migrated_url, tmp_path, monkeypatch):
    """While `gateway forget` waited for Slack, a run made its last attempt at the thread and dropped its row: forget's
    attempt found no row to count itself in and was neither logged nor told apart, so forget printed that the
    retention job tries the thread again, which nothing did."""
    engine = create_engine(migrated_url)
    try:
        sessions, thread = session_factory(engine), OperatorThread("acme", "COPS", "1700000000.000100")
        async with sessions() as session, session.begin():
            await keep_purged_threads(session, [thread])
            await session.execute(update(PurgedOperatorThread).values(attempts=OPERATOR_THREAD_ATTEMPTS - 1))
        settings = load_settings(write_config(tmp_path, database_url=migrated_url,
                                              bots=[{"name": "acme", "channels": {"web": {}}}]))
        real = slack_purged.erase_operator_threads

        async def the_job_meanwhile(settings, threads):  # while forget waits for Slack, a run gives the thread up
            monkeypatch.setattr(slack_purged, "erase_operator_threads", real)
            await erase_purged_threads(sessions, settings)
            return await real(settings, threads)

        monkeypatch.setattr(slack_purged, "erase_operator_threads", the_job_meanwhile)
        with capture_logs() as logs:
            [(left_thread, left)] = await erase_forgotten_threads(sessions, settings, [thread])
        assert left_thread == thread and (left.why, left.retries, left.dropped) == (
            "the bot has no Slack token in the config", 0, True)
        assert [(e["attempt"], e["retried"], e.get("dropped_meanwhile", False)) for e in logs
                if e["event"] == "retention.operator_thread_left"] == [(OPERATOR_THREAD_ATTEMPTS, False, False),
                                                                      (None, False, True)]
        async with sessions() as session:
            assert (await session.scalars(select(PurgedOperatorThread))).all() == []
    finally:
        await engine.dispose()
