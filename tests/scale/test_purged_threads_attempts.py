"""The retention job's attempts at the stored Slack operator threads (`purged_operator_threads`): what its log says
of each, and which threads a run bounded by `PURGE_OPERATOR_THREADS` takes."""

from __future__ import annotations

from contextlib import asynccontextmanager

from sqlalchemy import select, text
from structlog.testing import capture_logs

from gateway.operators import slack_purged
from gateway.operators.slack_forget import OperatorThread
from gateway.operators.slack_purged import erase_purged_threads, keep_purged_threads
from gateway.settings import load_settings
from storage.engine import create_engine, session_factory
from storage.models import PurgedOperatorThread
from tests.conftest import write_config

FIRST, SECOND, THIRD = (OperatorThread("acme", "COPS", f"1700000000.000{n}00") for n in (1, 2, 3))

_REFUSE_SECOND = {  # a real failure of the database as the attempt at SECOND is recorded, after FIRST's
    "sqlite": [f"CREATE TRIGGER refuse_second BEFORE UPDATE ON purged_operator_threads WHEN OLD.ts = '{SECOND.ts}' "
               "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
    "postgresql": [f"CREATE FUNCTION refuse_second() RETURNS trigger AS $$ BEGIN IF OLD.ts = '{SECOND.ts}' THEN "
                   "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
                   "CREATE TRIGGER refuse_second BEFORE UPDATE ON purged_operator_threads FOR EACH ROW "
                   "EXECUTE FUNCTION refuse_second()"],
}


@asynccontextmanager
async def _stored(url: str, tmp_path, threads: list[OperatorThread]):
    """(sessions, settings whose bot acme has no Slack token: each attempt is left at once) with `threads` stored."""
    engine = create_engine(url)
    try:
        sessions = session_factory(engine)
        async with sessions() as session, session.begin():
            await keep_purged_threads(session, threads)
        yield sessions, load_settings(write_config(tmp_path, database_url=url,
                                                   bots=[{"name": "acme", "channels": {"web": {}}}]))
    finally:
        await engine.dispose()


async def _attempts(sessions) -> dict[str, int]:
    async with sessions() as session:
        return {row.ts: row.attempts for row in (await session.scalars(select(PurgedOperatorThread))).all()}


async def test_an_attempt_the_store_failed_to_record_is_not_logged_as_recorded(migrated_url, tmp_path):
    """`retention.operator_thread_left` was logged as each row was written, before the transaction committed: a
    store that failed on a later row rolled back an attempt the log had said was counted (`attempt` 1 of 5,
    `retried`), and the next run logged `attempt` 1 again."""
    async with _stored(migrated_url, tmp_path, [FIRST, SECOND]) as (sessions, settings):
        async with sessions() as session, session.begin():
            for statement in _REFUSE_SECOND[session.bind.dialect.name]:
                await session.execute(text(statement))
        with capture_logs() as logs:
            await erase_purged_threads(sessions, settings)
        assert [e for e in logs if e["event"] == "retention.operator_thread_left"] == []
        [failed] = [e for e in logs if e["event"] == "retention.operator_threads_failed"]
        assert [t["ts"] for t in failed["threads"]] == [FIRST.ts, SECOND.ts]
        assert await _attempts(sessions) == {FIRST.ts: 0, SECOND.ts: 0}


async def test_a_run_takes_the_threads_waiting_longest_since_their_last_attempt(migrated_url, tmp_path, monkeypatch):
    """A run took the threads tried the fewest times first: with more new threads a run than its bound (a purge
    of over 500 escalated conversations a day), a thread Slack had refused once waited behind each day's new ones,
    never tried again, the customer's words left in Slack. It now takes the one whose last attempt (or, never
    tried, whose purge) is oldest."""
    monkeypatch.setattr(slack_purged, "PURGE_OPERATOR_THREADS", 1)
    async with _stored(migrated_url, tmp_path, [FIRST]) as (sessions, settings):
        tried = []
        for fresh in (SECOND, THIRD):  # the first run tries FIRST; then a new thread before each run
            with capture_logs() as logs:
                await erase_purged_threads(sessions, settings)
            tried += [e["ts"] for e in logs if e["event"] == "retention.operator_thread_left"]
            async with sessions() as session, session.begin():
                await keep_purged_threads(session, [fresh])
        for _ in range(3):
            with capture_logs() as logs:
                await erase_purged_threads(sessions, settings)
            tried += [e["ts"] for e in logs if e["event"] == "retention.operator_thread_left"]
        # A queue: each attempt sends the thread to its end, behind the threads stored before it (THIRD after FIRST's
        # second attempt). Before, FIRST's second attempt waited for SECOND and THIRD, each new when its run came.
        assert tried == [FIRST.ts, FIRST.ts, SECOND.ts, FIRST.ts, THIRD.ts]
