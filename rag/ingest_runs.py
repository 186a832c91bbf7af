"""Ingest outcomes: the `IngestReport` a run returns and its `storage.models.IngestRun` row.

A run's row is inserted as `running` when it starts, so a long ingest is visible while it works,
and is filled in with the report's counts and status when it ends: ok, partial or failed. A process
killed mid-run (`kill -9`, a lost machine) cannot do that: such a row is marked `interrupted` when the
server starts and when the next run of its source starts, each time only while no run of that source
is going anywhere (`gateway.knowledge` holds the source's locks, across processes on PostgreSQL). A scheduled
run that did not start, because the previous one of its source was still going, is a `skipped` row.

A run keeps at most `MAX_ERRORS` errors (a site that was down gives one a page): the first ones and
the last (a failed run's cause), and says how many it dropped (`errors_dropped`), in its row, its
report (`gateway ingest --json`) and `gateway ingest-runs`. Its row holds them redacted (`logs.redact`), as the
log shows them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field

from sqlalchemy import func, select, update
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.errors import IN_RUN_ERRORS, GatewayError
from gateway.observability.logs import redact
from storage.models import IngestRun
from storage.text import storable_text

ERROR_MAX_CHARS = 500
MAX_ERRORS = 100
INTERRUPTED = "the process stopped before this run ended"


@dataclass
class IngestReport:
    """Outcome of one source's ingest; counts are chunks."""

    bot: str
    source: str
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    documents: int = 0
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    status: str = "ok"  # ok | partial | failed | removed (a source no longer configured: its chunks deleted)
    # The chunks the source has in the knowledge base after the run. A failed run keeps the ones it had,
    # and its counts, all 0, read as an empty source without this.
    total: int = 0
    # Documents, beside the chunk counts: an edited document is `updated` chunks written and the `deleted`
    # ones they replace, which alone read as two changes.
    documents_new: int = 0
    documents_changed: int = 0
    documents_removed: int = 0
    # Documents chunked and embedded again with their content as it was: the embedding model or the chunking
    # changed, or the index lost their chunks. Not `documents_changed`, which is their content.
    documents_reembedded: int = 0

    def as_dict(self) -> dict[str, object]:
        """Plain dict for `ingest --json` and the admin API: the errors kept, and how many were dropped."""
        kept, dropped = kept_errors(self.errors)
        # Redacted here, by the process that ran it: a `gateway ingest` through the server may run where the
        # server's environment keys (OPENAI_API_KEY …) are unset, and could not tell them from text.
        return {**asdict(self), "errors": [redact(error) for error in kept], "errors_dropped": dropped,
                "duration_s": round(self.duration_s, 3)}

    def document_failed(self, doc_id: str, exc: Exception) -> None:
        """Record one document's failure as an error of the run, and log it with the document's id."""
        error = describe(exc)
        self.errors.append(f"{doc_id}: {error}")
        logging.getLogger("rag.ingest").warning("ingest.document_failed", extra={
            "bot": self.bot, "source": self.source, "document": doc_id, "error": error, IN_RUN_ERRORS: True})

    def document_stored(self, *, new: bool, reembedded: bool = False, chunks: int, written: int, stale: int) -> None:
        """Count a new, changed or `reembedded` (same content) document that was stored: its `chunks`, `written`
        anew, `stale` deleted."""
        if new:
            self.documents_new += 1
            self.added += chunks
        else:
            if reembedded:
                self.documents_reembedded += 1
            else:
                self.documents_changed += 1
            self.updated, self.unchanged, self.deleted = self.updated + written, self.unchanged + chunks - written, \
                self.deleted + stale

    def counts(self) -> dict[str, int]:
        """The chunk counts only."""
        return {k: getattr(self, k) for k in ("added", "updated", "deleted", "unchanged")}


async def start_run(sessions: async_sessionmaker[AsyncSession], bot: str, source: str, *, trigger: str) -> int:
    """Insert the run as `running`, so a long ingest is visible while it works."""
    async with sessions() as session:
        run = IngestRun(bot=bot, source=source, trigger=trigger, status="running")
        session.add(run)
        await session.commit()
        return run.id


START_AFTER_CANCEL_S = 5.0  # how long a cancelled start may still take to write its row


async def start_run_through_cancel(sessions: async_sessionmaker[AsyncSession], bot: str, source: str, *,
                                   trigger: str) -> tuple[int | None, asyncio.CancelledError | None]:
    """`start_run` finished though its caller is cancelled meanwhile (a stop as the row is written, or as its
    session closes after the commit): then (its id, or None, and the cancellation), for the caller to record
    the run as cancelled. Cut off there, the row stayed `running` until the source's next run."""
    starting = asyncio.ensure_future(start_run(sessions, bot, source, trigger=trigger))
    try:
        return await asyncio.shield(starting), None
    except asyncio.CancelledError as cancelled:
        try:  # bounded: a database slow to connect must not hold a stopping `gateway ingest` for its minute
            return await asyncio.wait_for(starting, timeout=START_AFTER_CANCEL_S), cancelled
        except Exception:  # not written after all, or not in time: nothing to record the end in
            return None, cancelled


async def record_run(
    sessions: async_sessionmaker[AsyncSession], report: IngestReport, *, trigger: str, run_id: int | None = None
) -> None:
    """Write the report into the run's row (a new row when there is none, e.g. no `start_run`)."""
    async with sessions() as session:
        run = await session.get(IngestRun, run_id) if run_id is not None else None
        if run is None:
            run = IngestRun(bot=report.bot, source=report.source, trigger=trigger)
            session.add(run)
        run.status = report.status
        run.added = report.added
        run.updated = report.updated
        run.deleted = report.deleted
        run.unchanged = report.unchanged
        kept, run.errors_dropped = kept_errors(report.errors)
        # Redacted as the log, /readyz and `gateway ingest-runs` show them: a provider's 401 may quote its key, and
        # whoever reads the database (a backup, a support dump) is no operator of this process's secrets.
        run.errors = [storable_text(redact(error)) for error in kept]
        run.duration_s = report.duration_s
        await session.flush()
        await session.execute(_interrupt(report.bot, report.source).where(IngestRun.id < run.id))
        await session.commit()


async def mark_interrupted(sessions: async_sessionmaker[AsyncSession], bot: str, source: str) -> int:
    """Mark the source's `running` runs `interrupted`; how many. Only for a caller that holds the source's
    run locks (`gateway.knowledge`): then no run of it is going anywhere, and each such row is an orphan."""
    async with sessions() as session:
        marked = (await session.execute(_interrupt(bot, source))).rowcount
        await session.commit()
        return marked


async def running_runs(sessions: async_sessionmaker[AsyncSession]) -> dict[tuple[str, str], IngestRun]:
    """(bot, source) -> its newest run recorded as `running`, for each source that has one."""
    async with sessions() as session:
        found = await session.scalars(select(IngestRun).where(IngestRun.status == "running").order_by(IngestRun.id))
        return {(run.bot, run.source): run for run in found}


def _interrupt(bot: str, source: str):
    return update(IngestRun).where(IngestRun.bot == bot, IngestRun.source == source, IngestRun.status == "running") \
        .values(status="interrupted", errors=[INTERRUPTED])


async def record_skipped(sessions: async_sessionmaker[AsyncSession], bot: str, source: str, *, trigger: str,
                         why: str) -> None:
    """Record a run that did not start (`skipped`), and `why`, so the history shows it."""
    async with sessions() as session:
        session.add(IngestRun(bot=bot, source=source, trigger=trigger, status="skipped", errors=[why], duration_s=0.0))
        await session.commit()


async def latest_runs(sessions: async_sessionmaker[AsyncSession]) -> dict[tuple[str, str], IngestRun]:
    """(bot, source) -> its latest run that ended (not `running`, nor `skipped`: it did not run), for
    health and metrics."""
    async with sessions() as session:
        latest = (select(func.max(IngestRun.id)).where(IngestRun.status.not_in(("running", "skipped")))
                  .group_by(IngestRun.bot, IngestRun.source))
        runs = (await session.scalars(select(IngestRun).where(IngestRun.id.in_(latest)))).all()
        return {(run.bot, run.source): run for run in runs}


async def recent_runs(sessions: async_sessionmaker[AsyncSession], *, bot: str | None = None,
                      source: str | None = None, limit: int = 20) -> list[IngestRun]:
    """The latest `limit` runs, newest first (running ones included), of one bot or source or all."""
    query = select(IngestRun).order_by(IngestRun.id.desc()).limit(limit)
    if bot is not None:
        query = query.where(IngestRun.bot == bot)
    if source is not None:
        query = query.where(IngestRun.source == source)
    async with sessions() as session:
        return list((await session.scalars(query)).all())


def errors_not_kept(dropped: int) -> str:
    """The line that says a run had `dropped` errors more than it kept (`gateway ingest`, `ingest-runs`)."""
    return f"… and {dropped} more error(s) not kept (a run keeps {MAX_ERRORS})"


def kept_errors(errors: list[str]) -> tuple[list[str], int]:
    """(the errors a run keeps, how many it drops): the first `MAX_ERRORS` - 1 and the last, which for a
    failed run is its cause. Only the first 100 were kept, without a word about the rest, and a run that
    failed after 100 page errors lost why."""
    if len(errors) <= MAX_ERRORS:
        return list(errors), 0
    return [*errors[: MAX_ERRORS - 1], errors[-1]], len(errors) - MAX_ERRORS


def describe(exc: BaseException) -> str:
    """`Type: message` of an error (the message alone for our own), short enough for a run's error list. A database error gives the
    driver's message, not SQLAlchemy's, which repeats the whole statement and its parameters."""
    if isinstance(exc, StatementError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled before it finished"
    message = " ".join(str(exc).split())
    if isinstance(exc, GatewayError) and message:
        text = message  # ours, written to be read as it is
    else:
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"
