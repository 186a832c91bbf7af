"""The gateway's view of the knowledge base: search for the pipeline, ingest for the CLI and scheduler.

It owns the embedders and the Qdrant index of one process, opened once in the lifespan.

One run of a source at a time: within a process by a lock per source, and across processes sharing
PostgreSQL by an advisory lock per source (`_advisory_lock`). Why across processes: with a Qdrant server
(`qdrant.url`) `gateway ingest` does not go through the running server, so it could run beside the
leader's scheduled run of the same source, both writing its chunks and document rows. The second run
waits, then finds everything unchanged. Different sources load side by side (at most
`MAX_SOURCE_RUNS` at once) and write one at a time (`Ingestor`): a slow site no longer holds up every
other source's runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.errors import RetrievalError
from gateway.models import utcnow
from gateway.settings import BotSettings, RetrievalSettings, Settings
from gateway.source_runs import SourceRun

if TYPE_CHECKING:  # the models and Qdrant load in `open`, not when the CLI starts
    from rag.ingest import IngestReport

log = structlog.get_logger("gateway.knowledge")
# The warning that a run waits for another run of its source: it reaches the terminal of the `gateway ingest`
# that waits, also through the server (`gateway.observability.relay`, as every warning of the run does).
waits = logging.getLogger("gateway.knowledge.wait")
MAX_SOURCE_RUNS = 4
"""Runs of different sources at once in a process. Each holds a database connection for its advisory
lock while it fetches: twenty sources due in the same minute took the pool (10 + 10) and starved the
web side."""


class Knowledge:
    """Embedders + index + hybrid search + incremental ingest, for one process."""

    def __init__(self, settings: Settings, *, sessions: async_sessionmaker[AsyncSession], metrics=None) -> None:
        self._settings = settings
        self._sessions = sessions
        self._metrics = metrics
        self._index = None
        self._search = None
        self._ingestor = None
        self._source_locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
        self._holders: dict[tuple[str, str], SourceRun] = {}  # (bot, source) -> its run here: whom a run waits for, how far it is
        self._source_runs = asyncio.Semaphore(MAX_SOURCE_RUNS)
        self._running: set[asyncio.Task] = set()  # tasks inside `ingest_source`, for `close`
        self._background: set[asyncio.Task] = set()  # `start_ingest`'s and the server check, held until they end

    async def open(self) -> None:
        """Open the index (raises `IndexBusy` if another process holds the folder) and load the models."""
        from rag.embeddings import DenseEmbedder, SparseEmbedder
        from rag.index import open_index
        from rag.ingest_setup import ingestor_for
        from rag.search import HybridSearch

        if self._index is not None:
            return
        self._index = open_index(self._settings.qdrant)
        if self._settings.qdrant.url and hasattr(self._index, "check_server_version"):
            # In the background: a server that is down must not hold up the start (it is logged, and /readyz says so).
            task = asyncio.create_task(self._index.check_server_version(), name="qdrant-version-check")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        dense = await asyncio.to_thread(DenseEmbedder.from_settings, self._settings.embedding)
        sparse = await asyncio.to_thread(SparseEmbedder)
        self._search = HybridSearch(self._index, dense, sparse)
        self._ingestor = ingestor_for(self._settings.embedding, self._index, dense, sparse, self._sessions)

    async def warm_up(self) -> None:
        """Read each bot's BM25 term statistics now, before the server reports ready. Why: a bot's first
        query read them inline (a full scan of its collection), so the first turns after a restart waited
        about a second each at 10k chunks in local mode. A failure is logged: the first query reads them."""
        for bot in self._settings.bots:
            if not bot.sources or self._index is None:
                continue
            try:
                await self._index.term_stats(bot.name)
            except Exception as exc:
                log.warning("knowledge.warm_up_failed", bot=bot.name, error=f"{type(exc).__name__}: {exc}"[:200])

    @property
    def index(self):
        """The open Qdrant index, or None before `open()`."""
        return self._index

    async def close(self, *, patience: float = 5.0) -> None:
        """Stop the ingests still running, then release the index (and its folder lock).

        A running ingest is cancelled and given `patience` seconds to record itself as failed
        ("cancelled before it finished"). Left to be cancelled with the event loop, it came to that
        after the database was closed, and its run stayed `running` until the next run of its source."""
        running = [t for t in self._running | self._background if t is not asyncio.current_task() and not t.done()]
        for task in running:
            if not task.cancelling():  # cancelled once already (the scheduler's shutdown): let it record
                task.cancel()
        if running:
            await asyncio.wait(running, timeout=patience)
        if self._index is not None:
            await self._index.close()
            self._index = None

    async def recorded_chunks(self, bot: str) -> int:
        """How many chunks the store records as indexed for the bot (compared with the index's count)."""
        from rag.document_rows import recorded_chunk_count

        return await recorded_chunk_count(self._sessions, bot)

    async def ping(self) -> None:
        """Raise unless the index answers."""
        if self._index is None:
            raise RetrievalError("index not open")
        await self._index.ping()

    async def search(self, bot: str, queries: list[str], retrieval: RetrievalSettings):
        """Hybrid search with gate 1; raises `RetrievalError` when the index is unavailable."""
        if self._search is None:
            raise RetrievalError("index not open")
        try:
            result = await self._search.search(bot, queries, retrieval)
        except RetrievalError:
            raise
        except Exception as exc:
            raise RetrievalError(f"search failed: {type(exc).__name__}: {exc}") from exc
        if result.refused and self._metrics:
            self._metrics.refusals.labels(bot=bot).inc()
        return result

    async def ingest(self, *, bot: str | None = None, source: str | None = None, trigger: str = "manual",
                     progress: Callable[..., None] | None = None) -> list[IngestReport]:
        """Ingest every source, or one bot's, or every bot's source named `source`.

        KeyError("bot 'x'") for an unknown bot and KeyError("source 'y' …") when no bot in scope has
        the source; nothing is ingested then. A failing source is in its report, never raised."""
        targets = self.ingest_targets(bot=bot, source=source)
        reports = [await self.ingest_source(name, src, trigger=trigger, progress=progress) for name, src in targets]
        if source is None:  # all of a bot's sources: a source taken out of (or renamed in) its config goes too
            reports += await self.remove_unconfigured_sources(bots={bot} if bot else {b.name for b in self._settings.bots})
        return reports

    async def remove_unconfigured_sources(self, *, bots: set[str]) -> list[IngestReport]:
        """Delete the chunks of `bots`' sources that the config no longer has, one report each (status
        `removed`). Until the daily retention job did this, a renamed source answered twice over."""
        from gateway.retention import purge_removed_sources
        from rag.ingest_runs import IngestReport

        if self._index is None:
            await self.open()
        purged = await purge_removed_sources(self._sessions, self._settings, index=self._index, bots=bots)
        return [IngestReport(*key.split("/", 1), deleted=chunks, status="removed",
                             documents_removed=purged.documents_by_source[key])
                for key, chunks in sorted(purged.by_source.items())]

    def start_ingest(self, *, bot: str | None = None, source: str | None = None, trigger: str = "manual",
                     progress: Callable[..., None] | None = None) -> asyncio.Task:
        """`ingest` in a task of its own, held until it ends, its failure logged: for a caller that may go
        away first (a CLI streaming the progress, interrupted), whose run must still end and be recorded."""
        task = asyncio.create_task(self.ingest(bot=bot, source=source, trigger=trigger, progress=progress),
                                   name="ingest")
        self._background.add(task)
        task.add_done_callback(self._background_ended)
        return task

    def _background_ended(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("ingest.failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)

    def ingest_targets(self, *, bot: str | None = None, source: str | None = None) -> list[tuple[str, str]]:
        """The (bot, source) pairs `ingest` would run, in order; the same KeyError as `ingest`."""
        bots = [self._bot(bot)] if bot else list(self._settings.bots)
        targets = [(b.name, s.name) for b in bots for s in b.sources if source is None or s.name == source]
        if source and not targets:
            raise KeyError(f"source {source!r} of bot {bot!r} ({_its_sources(bots[0])})" if bot
                           else f"source {source!r}: no bot has it ({_all_sources(bots)})")
        return targets

    async def ingest_source(self, bot: str, source: str, *, trigger: str = "manual",
                            progress: Callable[..., None] | None = None) -> IngestReport:
        """Ingest one source; failures are recorded in the report, not raised."""
        if self._ingestor is None:
            await self.open()
        bot_settings = self._bot(bot)
        src = next((s for s in bot_settings.sources if s.name == source), None)
        if src is None:
            raise KeyError(f"source {source!r} of bot {bot!r} ({_its_sources(bot_settings)})")
        label = f"{bot}/{source}"
        run = SourceRun(trigger)

        def report_progress(done: int, total: int) -> None:
            run.documents = (done, total)
            if progress is not None:
                progress(done, total, label)

        def report_fetching(done: int, total: int) -> None:  # its own bar, before the documents' one
            run.pages = (done, total)
            if progress is not None:
                progress(done, total, f"{label} pages fetched")

        task = asyncio.current_task()
        self._running.add(task)
        lock = self._source_locks[bot, source]
        if lock.locked() and (holder := self._holders.get((bot, source))):
            # A `gateway ingest` behind a scheduled crawl sat without a word until the crawl ended.
            waits.warning("%s: a %s run of this source is already going (since %s UTC); this one starts when it ends",
                          label, holder.kind, holder.since_hms)
        try:
            async with lock:
                run.since = utcnow()  # it holds the source from now
                self._holders[bot, source] = run
                try:
                    if self._source_runs.locked():  # a `gateway ingest` behind four crawls sat without a word
                        waits.warning("%s: the %d ingest slots (runs of different sources at once) are all taken, by %s; "
                                      "this run starts when one is free", label, MAX_SOURCE_RUNS,
                                      ", ".join(self.slot_holders()))
                    async with self._source_runs:
                        run.slot = True
                        async with self._advisory_lock(bot, source):
                            await self._mark_interrupted(bot, source)  # no run of it goes on anywhere now
                            return await self._ingestor.ingest_source(bot, src, trigger=trigger,
                                                                      progress=report_progress,
                                                                      fetch_progress=report_fetching)
                finally:
                    self._holders.pop((bot, source), None)
        finally:
            self._running.discard(task)

    def holder(self, bot: str, source: str) -> SourceRun | None:
        """The run of the source that holds its turn in this process, None when none does."""
        return self._holders.get((bot, source))

    def slot_holders(self) -> dict[str, SourceRun]:
        """"bot/source" -> its run, of the runs that hold this process's `MAX_SOURCE_RUNS` slots."""
        return {f"{bot}/{source}": run for (bot, source), run in self._holders.items() if run.slot}

    async def record_skipped(self, bot: str, source: str, *, trigger: str, why: str) -> None:
        """Record a run of the source that did not start, and why (`ingest-runs` shows it)."""
        from rag.ingest_runs import record_skipped

        await record_skipped(self._sessions, bot, source, trigger=trigger, why=why)

    async def mark_interrupted_runs(self) -> None:
        """At start: mark `interrupted` the runs a killed process left `running` (a `kill -9` mid-ingest left
        its row so until the next run of its source ended, often the next night). A source whose run is
        going in another process (it holds the source's advisory lock) is left alone: that run is real."""
        from rag.ingest_runs import running_runs

        try:
            for bot, source in await running_runs(self._sessions):
                if self._source_locks[bot, source].locked():
                    continue
                async with self._advisory_lock(bot, source, wait=False) as held:
                    if held:
                        await self._mark_interrupted(bot, source)
        except Exception as exc:  # a detail of the history: the start goes on, the next run of each source marks its own
            log.warning("ingest.interrupted_check_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    async def _mark_interrupted(self, bot: str, source: str) -> None:
        """Mark the source's `running` rows `interrupted`; the caller holds the source's locks."""
        from rag.ingest_runs import mark_interrupted

        if marked := await mark_interrupted(self._sessions, bot, source):
            log.warning("ingest.runs_interrupted", bot=bot, source=source, runs=marked,
                        why="a process stopped before these runs ended (killed, or its machine lost)")

    @contextlib.asynccontextmanager
    async def _advisory_lock(self, bot: str, source: str, *, wait: bool = True) -> AsyncIterator[bool]:
        """On PostgreSQL, hold the source's advisory lock (on a connection of its own) while it ingests.
        Yields whether it is held: with `wait=False`, False at once when another process holds it."""
        from gateway.leader import lock_key

        engine = self._sessions.kw.get("bind")
        if engine is None or engine.dialect.name != "postgresql":
            yield True  # SQLite: one process by design
            return
        key = lock_key(f"ingest:{bot}/{source}")
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            if not (await conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key})).scalar_one():
                if not wait:
                    yield False
                    return
                waits.warning("%s/%s: a run of this source is already going in another process; this one starts "
                              "when it ends", bot, source)
                await conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield True
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})

    def _bot(self, name: str) -> BotSettings:
        """The bot's settings; KeyError("bot 'name'"), which callers show as "unknown bot 'name'"."""
        try:
            return self._settings.bot(name)
        except KeyError:
            known = ", ".join(b.name for b in self._settings.bots) or "none"
            raise KeyError(f"bot {name!r} (configured: {known})") from None


def _all_sources(bots: list[BotSettings]) -> str:
    """Every bot's source names, for an error about one no bot has."""
    named = sorted({s.name for b in bots for s in b.sources})
    return f"the sources: {', '.join(named)}" if named else "no bot has a source"


def _its_sources(bot: BotSettings) -> str:
    """A bot's source names, for an error about one it does not have."""
    return f"its sources: {', '.join(s.name for s in bot.sources)}" if bot.sources else "it has no sources"
