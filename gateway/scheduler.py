"""Scheduled re-ingest: each knowledge source on its own cron, one run at a time per source.

At start, a bot whose collection is empty (a first deploy that skipped `gateway ingest`, a lost Qdrant
volume) has its sources ingested at once, on the leader: otherwise it would answer every question with
its fallback text until its cron comes round, often the next night. So has a bot whose collection holds
fewer points than the store records chunks (a rebuild killed midway): that ingest embeds only the
missing ones (`rag.ingest`).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gateway.backoff import doubling
from gateway.cron import cron_trigger
from gateway.knowledge import MAX_SOURCE_RUNS
from gateway.settings import Settings
from gateway.source_runs import SourceRun

if TYPE_CHECKING:  # rag imports the embedders; the scheduler needs only the report's shape
    from rag.ingest_runs import IngestReport

log = structlog.get_logger("gateway.scheduler")
STILL_RUNNING = "not run: the previous scheduled run of this source was still going"

STARTUP_RETRY_S = 2.0
STARTUP_RETRY_MAX_S = 60.0


class IngestScheduler:
    """Runs `knowledge.ingest_source` for every configured source on its cron schedule.

    Jobs come from config.yaml, so no job store is needed. `max_instances=1` keeps one run per source
    at a time; a run that fails is recorded by the ingester and logged here, and never stops the
    scheduler or the server.
    """

    def __init__(self, settings: Settings, *, knowledge: Any, timezone: str = "UTC", leader: Any = None) -> None:
        self._settings = settings
        self._knowledge = knowledge
        # gateway.leader.LeaderElection: with several replicas, only the leader runs scheduled jobs.
        self._leader = leader
        self._scheduler = AsyncIOScheduler(timezone=timezone)
        self._first_ingest: asyncio.Task | None = None
        self._warned_local_index = False
        self._sources: dict[str, tuple[str, str]] = {}  # job id -> (bot, source), for its skipped runs
        self._recording: set[asyncio.Task] = set()  # skipped runs being recorded, held until they are
        self._scheduler.add_listener(self._skipped, EVENT_JOB_MAX_INSTANCES)
        for bot in settings.bots:
            for source in bot.sources:
                self._scheduler.add_job(
                    self._run, cron_trigger(source.schedule, timezone=timezone),
                    args=[bot.name, source.name], id=f"{bot.name}/{source.name}", name=f"ingest {bot.name}/{source.name}",
                    max_instances=1, coalesce=True, misfire_grace_time=300,
                )
                self._sources[f"{bot.name}/{source.name}"] = (bot.name, source.name)

    def add_job(self, job_id: str, func: Any, *, cron: str, timezone: str = "UTC") -> None:
        """Schedule another leader-only periodic job (e.g. retention purges) on a cron expression."""

        async def leader_only() -> None:
            if await self._leads(job_id):
                await func()

        self._scheduler.add_job(leader_only, cron_trigger(cron, timezone=timezone), id=job_id,
                                name=job_id, max_instances=1, coalesce=True, misfire_grace_time=300)

    async def _leads(self, job: str) -> bool:
        """Whether this replica runs `job` now: it leads, or the lock is free and it takes it at once. Why
        not wait for the next campaign (every 5 s): a leader that died just before a tick left that tick to
        nobody, and a daily `0 3 * * *` ingest was lost until the next night."""
        if self._leader is None or await self._leader.holds() or await self._leader.campaign():
            return True
        log.info("scheduler.skipped_not_leader", job=job)
        return False

    async def _run(self, bot: str, source: str) -> None:
        if not await self._leads(f"{bot}/{source}"):
            self._warn_local_index_not_ingested()
            return
        log.info("ingest.scheduled_start", bot=bot, source=source)
        try:
            report = await self._knowledge.ingest_source(bot, source, trigger="schedule")
            _log_run("ingest.scheduled_done", report)
        except asyncio.CancelledError:
            # The server stops mid-run (SIGTERM): the ingester recorded the run as cancelled and warned. Raised
            # on, APScheduler logged it as `error: Job "ingest …" raised an exception` with its traceback.
            log.info("ingest.scheduled_cancelled", bot=bot, source=source)
            return
        except Exception:  # recorded in ingest_runs by the ingester; the scheduler keeps going
            log.exception("ingest.scheduled_failed", bot=bot, source=source)
        self.log_next_runs(f"{bot}/{source}")  # this source's: every other one's is as logged before

    def _skipped(self, event: JobSubmissionEvent) -> None:
        """A source's cron came round while its previous scheduled run was still going, or still waiting for
        another run of its source (`max_instances=1`): recorded and logged as a `skipped` run, with which.
        APScheduler's own warning was all there was, and `ingest-runs` showed nothing for that night. (Called
        by APScheduler inside the event loop.)"""
        if (target := self._sources.get(event.job_id)) is None:
            return  # another leader-only job (retention): not an ingest
        bot, source = target
        why = why_skipped(self._knowledge.holder(bot, source), self._knowledge.slot_holders())
        log.warning("ingest.scheduled_skipped", bot=bot, source=source, why=why,
                    scheduled_at=[t.isoformat() for t in event.scheduled_run_times])
        task = asyncio.get_running_loop().create_task(self._record_skipped(bot, source, why), name="ingest-skipped")
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    async def _record_skipped(self, bot: str, source: str, why: str) -> None:
        try:
            await self._knowledge.record_skipped(bot, source, trigger="schedule", why=why)
        except Exception:  # the store is down: the log line above is all there is
            log.exception("ingest.skipped_not_recorded", bot=bot, source=source)

    def _warn_local_index_not_ingested(self) -> None:
        """Once: this replica skips scheduled ingests, but reads an index of its own. Its answers then
        come from a copy the leader never updates, and nothing else says so."""
        if self._settings.qdrant.url is not None or self._warned_local_index:
            return
        self._warned_local_index = True
        log.warning("scheduler.local_index_not_ingested", qdrant_path=self._settings.qdrant.path,
                    why="another replica leads and re-ingests its own index folder, not this one's; "
                        "several replicas need a shared Qdrant server (qdrant.url)")

    def start(self) -> None:
        """Start the cron clock inside the running event loop, and fill empty collections now."""
        self._scheduler.start()
        self.log_next_runs()
        self._first_ingest = asyncio.get_running_loop().create_task(self.ingest_empty(), name="ingest-empty-at-start")

    async def ingest_empty(self) -> None:
        """Ingest, once, the sources of every bot whose collection holds no chunk, or fewer than the
        store records (leader only)."""
        for bot in self._settings.bots:
            if not bot.sources or (why := await self._startup_reason(bot.name)) is None:
                continue
            for source in bot.sources:
                if not await self._leads(f"{bot.name}/{source.name}"):
                    return
                log.info("ingest.startup_start", bot=bot.name, source=source.name, **why)
                try:
                    report = await self._knowledge.ingest_source(bot.name, source.name, trigger="startup")
                    _log_run("ingest.startup_done", report)
                except Exception:  # recorded in ingest_runs by the ingester
                    log.exception("ingest.startup_failed", bot=bot.name, source=source.name)

    async def _startup_reason(self, bot: str) -> dict[str, Any] | None:
        """Why the bot's sources are to be ingested now, None when they are not. A Qdrant server that does
        not answer yet (a compose stack starting side by side) is asked again, 2 s, 4 s, … up to a minute
        apart: skipped, the bot answered with its fallback until its cron came round, often the next night."""
        for attempt in itertools.count(1):
            try:
                if (indexed := await self._knowledge.index.count(bot)) == 0:
                    return {"reason": "the collection is empty"}
                # A rebuild killed midway leaves fewer points than recorded chunks: the ingest
                # embeds only the missing ones, so resuming it now is cheap.
                if indexed >= (recorded := await self._knowledge.recorded_chunks(bot)):
                    return None
                return {"reason": "the collection lacks recorded chunks", "indexed": indexed, "recorded": recorded}
            except Exception as exc:  # /readyz says so meanwhile
                wait = doubling(attempt, first=STARTUP_RETRY_S, cap=STARTUP_RETRY_MAX_S)
                log.warning("ingest.startup_check_failed", bot=bot, error=f"{type(exc).__name__}: {exc}"[:200],
                            retry_in=wait)
                await asyncio.sleep(wait)
        return None  # unreachable: itertools.count never ends

    def shutdown(self) -> None:
        """Stop without waiting for running jobs (they are cancelled with the loop)."""
        if self._first_ingest is not None and not self._first_ingest.done():
            self._first_ingest.cancel()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def next_runs(self) -> dict[str, str | None]:
        """Next run time of each source, ISO 8601, keyed `bot/source`."""
        out: dict[str, str | None] = {}
        for job in self._scheduler.get_jobs():
            next_run = getattr(job, "next_run_time", None)
            out[job.id] = next_run.isoformat() if next_run else None
        return out

    def log_next_runs(self, job: str | None = None) -> None:
        """Log when each source (or only `job`) runs next, so an operator can see the schedule."""
        for job_id, when in self.next_runs().items():
            if job is None or job_id == job:
                log.info("ingest.next_run", job=job_id, next_run=when)


def why_skipped(holder: SourceRun | None, slot_holders: dict[str, SourceRun]) -> str:
    """Why a scheduled run did not start, given `holder`, the run holding its source: the previous scheduled
    run was still going, or was still waiting for another kind of run of the source (a first deploy's
    start-up run, a `gateway ingest`), which is then named; or the run holding the source was still waiting
    for a slot (`MAX_SOURCE_RUNS`), and then the runs of `slot_holders` ("bot/source" -> run) hold them."""
    if holder is not None and not holder.slot:
        # "Still going" sent the user looking for a run of this source that had not started.
        held = ", ".join(f"{label} ({run.kind}, since {run.since_hms} UTC)" for label, run in slot_holders.items())
        waiting = (f"waiting for one of the {MAX_SOURCE_RUNS} ingest slots (runs of different sources at once), held "
                   f"by {held or 'runs that were just ending'}")
        if holder.trigger == "schedule":
            return f"not run: the previous scheduled run of this source was still {waiting}"
        return (f"not run: a {holder.kind} run of this source (since {holder.since_hms} UTC) was still {waiting}, and "
                "the previous scheduled run was waiting for it")
    if holder is None or holder.trigger == "schedule":
        return STILL_RUNNING
    return (f"not run: a {holder.kind} run of this source was still going (since {holder.since_hms} UTC), and the "
            "previous scheduled run was waiting for it")


def _log_run(event: str, report: IngestReport) -> None:
    """One line per finished run, with how it ended: a failed or partial run is a warning with its
    first errors (the ingester never raises, so a failure used to read as a run of zero counts)."""
    fields = dict(bot=report.bot, source=report.source, status=report.status, **report.counts())
    if report.status == "ok":
        log.info(event, **fields)
    else:
        log.warning(event, errors=report.errors[:3], error_count=len(report.errors), **fields)
