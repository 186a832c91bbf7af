"""The Slack operator threads of the conversations the retention job purges or `gateway forget` deletes, deleted
in Slack after the rows.

The purge and `gateway forget` store each thread (`storage.models.PurgedOperatorThread`) in the transaction that
deletes its escalation, so the thread outlives the rows that named it, and a process stopped before Slack answered
leaves it stored. `gateway forget` makes the first attempt at its own (`erase_forgotten_threads`). After the purge,
a run deletes the gateway's posts in at most `PURGE_OPERATOR_THREADS` stored threads (a first purge of a full
store must not hold the job for hours of Slack's rate limits), the ones waiting longest since their last attempt
(or, never tried, since they were stored) first, and drops
each row once its thread is gone. The others wait for the next run: those past the bound
(`retention.operator_threads_waiting`), those Slack refused or could not be reached for (a
`retention.operator_thread_left` warning each time, given up after `OPERATOR_THREAD_ATTEMPTS` attempts, for
someone to delete by hand), and those of a run (or a forget) stopped meanwhile. An attempt that finds a thread's
row dropped meanwhile by another (which deleted the thread or gave it up) is logged too, and no retry is promised.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import utcnow
from gateway.operators.slack_forget import OperatorThread, erase_operator_threads
from gateway.settings import Settings
from storage.models import PurgedOperatorThread
from storage.upsert import dialect_insert

log = structlog.get_logger("gateway.retention")

PURGE_OPERATOR_THREADS = 500  # Slack operator threads of purged conversations erased per run, at most
OPERATOR_THREAD_ATTEMPTS = 5  # runs that try a thread Slack refuses (one a day on the default schedule)
ROWS_PER_STATEMENT = 1000  # 3 parameters a row: PostgreSQL takes 32,767 a statement


@dataclass(frozen=True)
class Left:
    """A thread an attempt did not delete: why, and how many more times the retention job tries it (0: never;
    None: not known, as the store failed to record the attempt and left the thread's row as it was, tried again
    next run). `dropped`: another attempt (a run's, or another forget's) dropped the row meanwhile, having deleted
    the thread or given it up, so this one found no row to count itself in."""
    why: str
    retries: int | None
    dropped: bool = False


async def keep_purged_threads(session: AsyncSession, threads: list[OperatorThread]) -> None:
    """Store `threads` in the caller's transaction, the one that deletes their escalations."""
    rows = [{"bot": t.bot, "channel": t.channel or "", "ts": t.ts} for t in dict.fromkeys(threads)]
    for start in range(0, len(rows), ROWS_PER_STATEMENT):  # a batch's threads may be more than a statement takes
        await session.execute(dialect_insert(session, PurgedOperatorThread).values(
            rows[start:start + ROWS_PER_STATEMENT]).on_conflict_do_nothing(index_elements=["bot", "channel", "ts"]))


async def erase_purged_threads(sessions: async_sessionmaker[AsyncSession], settings: Settings) -> None:
    """Delete the gateway's posts in up to `PURGE_OPERATOR_THREADS` stored threads, and the rows of those gone.

    Never a failure of the purge, whose rows are committed; a stop leaves every thread stored for the next run."""
    # The longest waiting first, a queue each attempt sends a thread to the end of: by fewest attempts, one Slack
    # refused waited behind each run's new threads, for good once they were more than the bound.
    order = (func.coalesce(PurgedOperatorThread.tried, PurgedOperatorThread.since), PurgedOperatorThread.bot,
             PurgedOperatorThread.channel, PurgedOperatorThread.ts)
    async with sessions() as session:
        rows = list((await session.scalars(select(PurgedOperatorThread).order_by(*order)
                                           .limit(PURGE_OPERATOR_THREADS))).all())
        waiting = (await session.execute(select(func.count()).select_from(PurgedOperatorThread))).scalar_one() - len(rows)
    if rows:
        await _erase_stored(sessions, settings, [OperatorThread(row.bot, row.channel or None, row.ts) for row in rows])
    if waiting:
        log.info("retention.operator_threads_waiting", waiting=waiting, bound=PURGE_OPERATOR_THREADS)


async def erase_forgotten_threads(sessions: async_sessionmaker[AsyncSession], settings: Settings,
                                  threads: list[OperatorThread]) -> list[tuple[OperatorThread, Left]]:
    """`gateway forget`'s attempt at the threads it stored (`keep_purged_threads`, in its transaction): their
    first, the retention job's runs the others. The threads left, each with why and what happens to it next."""
    if not threads:
        return []
    left = await _erase_stored(sessions, settings, list(dict.fromkeys(threads)))
    return [(thread, left[thread]) for thread in dict.fromkeys(threads) if thread in left]


async def _erase_stored(sessions: async_sessionmaker[AsyncSession], settings: Settings,
                        threads: list[OperatorThread]) -> dict[OperatorThread, Left]:
    """Delete the gateway's posts in `threads`, drop the rows of those gone or given up, count this attempt in the
    others'; the threads left, each with why and what happens to it next (`Left`)."""
    try:
        left = dict(await erase_operator_threads(settings, threads))
    except asyncio.CancelledError:
        raise  # which went is not known: each is stored still, and the next run asks Slack again
    except Exception as exc:  # a bug, or an answer nothing expected: each is tried again
        log.exception("retention.operator_threads_failed", threads=[_named(t) for t in threads])
        left = dict.fromkeys(threads, f"{type(exc).__name__}: {exc}")
    recorded: list[dict] = []  # each attempt left, logged once its transaction has committed
    outcome: dict[OperatorThread, Left] = {}
    try:  # after Slack's answers: a store that fails now must not hide them (forget's are printed)
        async with sessions() as session, session.begin():
            # In the key's order, as any other run or forget takes them: each in its own order deadlocked on PostgreSQL.
            for thread in sorted(threads, key=_key):
                where = (PurgedOperatorThread.bot == thread.bot, PurgedOperatorThread.channel == (thread.channel or ""),
                         PurgedOperatorThread.ts == thread.ts)
                why = left.get(thread)
                if why is None:
                    await session.execute(delete(PurgedOperatorThread).where(*where))
                    continue
                # Counted in the row, never from a count read before Slack answered: `gateway forget` and a run
                # trying the thread at once each add theirs (the row's lock orders them on PostgreSQL).
                attempt = (await session.execute(update(PurgedOperatorThread).where(*where).values(
                    attempts=PurgedOperatorThread.attempts + 1, why=why[:1000], tried=utcnow())
                    .returning(PurgedOperatorThread.attempts))).scalar_one_or_none()
                if attempt is None:
                    # Another attempt (a run's, a forget's) dropped the row meanwhile, the thread deleted or given up:
                    # nothing tries it again, and this attempt has no count to add to, but is said as any other.
                    outcome[thread] = Left(why, 0, dropped=True)
                    recorded.append({**_named(thread), "why": why, "attempt": None,
                                     "attempts": OPERATOR_THREAD_ATTEMPTS, "retried": False, "dropped_meanwhile": True})
                    continue
                retried = attempt < OPERATOR_THREAD_ATTEMPTS
                if not retried:
                    await session.execute(delete(PurgedOperatorThread).where(*where))
                outcome[thread] = Left(why, max(OPERATOR_THREAD_ATTEMPTS - attempt, 0))
                recorded.append({**_named(thread), "why": why, "attempt": attempt,
                                 "attempts": OPERATOR_THREAD_ATTEMPTS, "retried": retried})
    except Exception:  # each row stays as it was: the next run asks Slack again, and drops those gone
        log.exception("retention.operator_threads_failed", threads=[_named(t) for t in threads])
        return {thread: Left(why, None) for thread, why in left.items()}
    for attempt in recorded:
        log.warning("retention.operator_thread_left", **attempt)
    return outcome


def _key(thread: OperatorThread) -> tuple[str, str, str]:
    """The thread's row's primary key."""
    return thread.bot, thread.channel or "", thread.ts


def _named(thread: OperatorThread) -> dict[str, str | None]:
    return {"bot": thread.bot, "channel": thread.channel, "ts": thread.ts}
