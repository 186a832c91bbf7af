"""Scheduled re-ingest: runs on cron inside serve, records failures, never takes the server down."""

from __future__ import annotations

import asyncio
import re
from contextlib import asynccontextmanager
from datetime import datetime, timezone

import structlog
from sqlalchemy import select

from gateway.knowledge import Knowledge
from gateway.scheduler import IngestScheduler
from gateway.settings import load_settings
from storage.engine import create_engine, session_factory
from storage.models import IngestRun
from tests.conftest import upgrade, write_config
from tests.rag.ingest_helpers import HangingSite, open_knowledge, runs


def _one_document(tmp_path):
    """A directory source's folder holding one short Markdown document."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nThe answer is forty-two.\n")
    return docs


def _fire_now(scheduler: IngestScheduler) -> None:
    """Bring acme/site's cron round now."""
    scheduler._scheduler.modify_job("acme/site", next_run_time=datetime.now(timezone.utc))


@asynccontextmanager
async def _scheduled_run_going(tmp_path):
    """(the site, the store's sessions, the knowledge base, the scheduler) while a scheduled run of acme/site
    waits on its one page, which answers once `site.release` is set; the scheduler is shut down after."""
    async with HangingSite() as site:
        bot = {"name": "acme", "channels": {"web": {}},
               "sources": [{"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 4 * * 1"}]}
        async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
            scheduler = IngestScheduler(settings, knowledge=knowledge)
            scheduler._scheduler.start()  # the cron clock alone: the empty collection's start-up run would hang too
            try:
                _fire_now(scheduler)
                await asyncio.wait_for(site.asked.wait(), 30)  # the run is going
                yield site, sessions, knowledge, scheduler
            finally:
                scheduler.shutdown()


async def test_scheduler_records_failing_run_and_keeps_going(tmp_path):
    docs = _one_document(tmp_path)
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "missing", "type": "directory", "path": str(tmp_path / "does-not-exist"), "schedule": "*/5 * * * *"},
        {"name": "good", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"},
    ]}
    async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
        scheduler = IngestScheduler(settings, knowledge=knowledge)
        scheduler.start()
        await scheduler._first_ingest  # the empty collection's ingest at start (its own test below)
        try:
            runs = scheduler.next_runs()
            assert set(runs) == {"acme/missing", "acme/good"} and all(runs.values())
            with structlog.testing.capture_logs() as logs:
                await scheduler._run("acme", "missing")  # the cron job body: must not raise
                await scheduler._run("acme", "good")
            done = {e["source"]: e for e in logs if e["event"] == "ingest.scheduled_done"}
            # A failed run says so, with its error; it used to be an info line of zero counts.
            assert done["missing"]["log_level"] == "warning" and done["missing"]["status"] == "failed"
            assert "does-not-exist" in done["missing"]["errors"][0]
            assert done["good"]["log_level"] == "info" and done["good"]["status"] == "ok"
            assert scheduler.next_runs()["acme/good"] == runs["acme/good"]  # the scheduler is still running
            # After a run, the next run of that source: every source's after each run was a wall of lines.
            assert [e["job"] for e in logs if e["event"] == "ingest.next_run"] == ["acme/missing", "acme/good"]
        finally:
            scheduler.shutdown()
        async with sessions() as session:
            recorded = {r.source: r for r in (await session.execute(select(IngestRun).order_by(IngestRun.id))).scalars()}
    assert recorded["missing"].status == "failed" and recorded["missing"].errors
    assert recorded["missing"].trigger == "schedule"
    assert recorded["good"].status == "ok" and recorded["good"].unchanged >= 1  # the start filled it


async def test_an_empty_collection_is_ingested_at_start_and_a_filled_one_is_not(tmp_path):
    # A first deploy that skipped `gateway ingest`, or a lost Qdrant volume: without this, every question
    # gets the fallback until the source's cron comes round (here: Mondays at 04:00).
    docs = _one_document(tmp_path)
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "good", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"}]}
    async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
        for _ in range(2):  # the second start finds the collection filled
            scheduler = IngestScheduler(settings, knowledge=knowledge)
            scheduler.start()
            await scheduler._first_ingest
            scheduler.shutdown()
        assert await knowledge.index.count("acme") >= 1
        async with sessions() as session:
            runs = (await session.execute(select(IngestRun))).scalars().all()
    assert [(r.trigger, r.status) for r in runs] == [("startup", "ok")]


async def test_two_processes_ingesting_one_source_take_turns_on_postgres(tmp_path, postgres_url):
    # With a Qdrant server, `gateway ingest` runs beside the leader's scheduled run of the same source.
    # Two Knowledge objects (two processes' worth, each with its own index here) share one PostgreSQL.
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(8):
        (docs / f"d{i}.md").write_text(f"# Topic {i}\n\n" + f"Paragraph about topic {i}. " * 40)
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"}]}
    configs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        configs.append(load_settings(write_config(tmp_path / name, database_url=postgres_url, bots=[bot])))
    await asyncio.to_thread(upgrade, postgres_url)
    engines = [create_engine(postgres_url) for _ in configs]
    knowledges = [Knowledge(settings, sessions=session_factory(engine)) for settings, engine in zip(configs, engines)]
    for knowledge in knowledges:
        await knowledge.open()
    try:
        reports = await asyncio.gather(*(k.ingest_source("acme", "docs", trigger="cli") for k in knowledges))
    finally:
        for knowledge in knowledges:
            await knowledge.close()
    async with session_factory(engines[0])() as session:
        runs = (await session.execute(select(IngestRun).order_by(IngestRun.started_at))).scalars().all()
    for engine in engines:
        await engine.dispose()
    assert [r.status for r in reports] == ["ok", "ok"] and [r.status for r in runs] == ["ok", "ok"]
    # The second run waited for the first to finish: it found every document recorded, and wrote their
    # chunks to its own index as updates, not additions. (Its start time against the first's duration was
    # flaky under load: that duration includes opening a connection.)
    first, second = sorted(reports, key=lambda r: -r.added)
    assert first.added > 0 and first.updated == 0
    assert second.added == 0 and second.updated == first.added


async def test_shutdown_records_a_running_ingest_as_cancelled_not_running(tmp_path):
    # Left to be cancelled with the event loop, the run came to record itself after the database was
    # closed and stayed `running`; `Knowledge.close` now cancels it and lets it record the end.
    fetching = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fetching.set()
        await reader.read()  # a web server that accepts the request and says nothing

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/slow"
    bot = {"name": "acme", "channels": {"web": {}},
           "sources": [{"name": "site", "type": "urls", "urls": [url], "schedule": "0 4 * * 1"}]}
    try:
        async with open_knowledge(tmp_path, bot) as (_, sessions, knowledge):
            ingest = asyncio.create_task(knowledge.ingest_source("acme", "site"))
            # The fetch is waiting: the run's row is written. (Its row seen was not enough: a cancel as its
            # session closed, after the commit, left it `running`; test_ingest_runs has that case.)
            await asyncio.wait_for(fetching.wait(), timeout=60)
            ingest.cancel()  # what the scheduler's shutdown does
            await knowledge.close()
            assert ingest.done()
            async with sessions() as session:
                [run] = (await session.execute(select(IngestRun))).scalars().all()
    finally:
        server.close()
    assert run.status == "failed" and run.errors == ["cancelled before it finished"]


async def test_a_source_waiting_on_a_slow_site_does_not_hold_up_another_source(tmp_path):
    # One lock for every source let a site that took an hour to crawl hold every other source's runs.
    docs = _one_document(tmp_path)
    async with HangingSite() as site:
        bot = {"name": "acme", "channels": {"web": {}}, "sources": [
            {"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 4 * * 1"},
            {"name": "docs", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"},
        ]}
        async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
            slow = asyncio.create_task(knowledge.ingest_source("acme", "site"))
            again = asyncio.create_task(knowledge.ingest_source("acme", "site"))  # the same source: waits its turn
            await asyncio.wait_for(site.asked.wait(), 30)
            local = await asyncio.wait_for(knowledge.ingest_source("acme", "docs"), 30)  # while the site hangs
            assert local.status == "ok" and local.added == 1 and not slow.done()
            site.release.set()
            first, second = await asyncio.wait_for(asyncio.gather(slow, again), 60)
    assert (first.status, first.added) == ("ok", 1)
    assert second.status == "ok" and second.added == 0 and second.unchanged == 1
    assert site.most_at_once == 1  # one run of a source at a time


async def test_at_most_max_source_runs_sources_run_at_once(tmp_path):
    # Each run holds a database connection for its lock while it fetches: twenty at once took the pool.
    from gateway.knowledge import MAX_SOURCE_RUNS

    async with HangingSite() as site:
        sources = [{"name": f"site{i}", "type": "urls", "urls": [f"{site.url}?{i}"], "schedule": "0 4 * * 1"}
                   for i in range(MAX_SOURCE_RUNS + 2)]
        async with open_knowledge(tmp_path, {"name": "acme", "channels": {"web": {}}, "sources": sources}) as (
                _, _, knowledge):
            runs = [asyncio.create_task(knowledge.ingest_source("acme", s["name"])) for s in sources]
            # Until every run holds its source and waits for a slot or fetches in one, and the fetching ones
            # are at the site: a run without a slot, held at the semaphore, sends no request.
            for _ in range(1000):
                if all(knowledge.holder("acme", s["name"]) for s in sources) and site.holding >= MAX_SOURCE_RUNS:
                    break
                await asyncio.sleep(0.02)
            assert len(knowledge.slot_holders()) == MAX_SOURCE_RUNS
            assert site.holding == MAX_SOURCE_RUNS
            site.release.set()
            reports = await asyncio.wait_for(asyncio.gather(*runs), 60)
    assert [r.status for r in reports] == ["ok"] * len(sources) and site.most_at_once == MAX_SOURCE_RUNS


async def test_a_run_that_waits_for_another_run_of_its_source_says_so(tmp_path, caplog):
    # `gateway ingest` behind a scheduled crawl of the same source sat without a word until the crawl ended.
    async with HangingSite() as site:
        bot = {"name": "acme", "channels": {"web": {}},
               "sources": [{"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 4 * * 1"}]}
        async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
            crawl = asyncio.create_task(knowledge.ingest_source("acme", "site", trigger="schedule"))
            await asyncio.wait_for(site.asked.wait(), 30)
            assert not [r for r in caplog.records if "already going" in r.getMessage()]
            manual = asyncio.create_task(knowledge.ingest_source("acme", "site", trigger="cli"))
            await asyncio.sleep(0)
            [waiting] = [r for r in caplog.records if "already going" in r.getMessage()]
            assert waiting.levelname == "WARNING"  # a warning: relayed to a CLI's terminal
            assert re.fullmatch(r"acme/site: a scheduled run of this source is already going \(since \d\d:\d\d:\d\d UTC\); "
                                r"this one starts when it ends", waiting.getMessage())
            site.release.set()
            await asyncio.wait_for(asyncio.gather(crawl, manual), 60)


async def test_a_scheduled_run_skipped_while_the_last_one_still_goes_is_recorded_and_logged(tmp_path):
    # APScheduler's own warning was all there was: `ingest-runs` showed nothing for that night.
    from gateway.scheduler import STILL_RUNNING
    from rag.ingest_runs import latest_runs

    async with _scheduled_run_going(tmp_path) as (site, sessions, _, scheduler):
        with structlog.testing.capture_logs() as logs:
            _fire_now(scheduler)
            for _ in range(250):  # until the skipped run is recorded
                if len(recorded := await runs(sessions)) == 2:
                    break
                await asyncio.sleep(0.02)
            assert [(r.trigger, r.status) for r in recorded] == [("schedule", "running"), ("schedule", "skipped")]
            assert recorded[1].errors == [STILL_RUNNING]
            site.release.set()
            for _ in range(500):  # until the run that was going ends
                if (recorded := await runs(sessions))[0].status != "running":
                    break
                await asyncio.sleep(0.02)
        latest = await latest_runs(sessions)
    [skipped] = [e for e in logs if e["event"] == "ingest.scheduled_skipped"]
    assert (skipped["log_level"], skipped["source"], skipped["why"]) == ("warning", "site", STILL_RUNNING)
    assert recorded[0].status == "ok" and latest[("acme", "site")].id == recorded[0].id  # /readyz: the run that ran


async def test_a_scheduled_run_skipped_behind_a_start_up_run_names_that_run(tmp_path):
    # A first deploy's start-up ingest of a large site outlasts two of its hourly crons: the first waits for
    # it, the second was recorded as skipped because "the previous scheduled run of this source was still
    # going", which had not even started; the run going was the start-up one.
    async with HangingSite() as site:
        bot = {"name": "acme", "channels": {"web": {}},
               "sources": [{"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 4 * * 1"}]}
        async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
            scheduler = IngestScheduler(settings, knowledge=knowledge)
            scheduler.start()  # the empty collection's start-up run, held on the page
            try:
                await asyncio.wait_for(site.asked.wait(), 30)
                with structlog.testing.capture_logs() as logs:
                    _fire_now(scheduler)
                    for _ in range(250):  # until that scheduled run waits for the start-up run
                        if any(e["event"] == "ingest.scheduled_start" for e in logs):
                            break
                        await asyncio.sleep(0.02)
                    _fire_now(scheduler)
                    for _ in range(250):  # until the skipped run is recorded
                        if len(recorded := await runs(sessions)) == 2:
                            break
                        await asyncio.sleep(0.02)
            finally:
                site.release.set()
                scheduler.shutdown()
    assert [(r.trigger, r.status) for r in recorded] == [("startup", "running"), ("schedule", "skipped")]
    why = (r"not run: a start-up run of this source was still going \(since \d\d:\d\d:\d\d UTC\), and the previous "
           r"scheduled run was waiting for it")
    assert re.fullmatch(why, recorded[1].errors[0]), recorded[1].errors
    [skipped] = [e for e in logs if e["event"] == "ingest.scheduled_skipped"]
    assert skipped["why"] == recorded[1].errors[0]


async def test_a_qdrant_not_answering_yet_at_start_is_asked_again_and_the_ingest_runs(tmp_path, monkeypatch):
    # docker compose starts the gateway beside its Qdrant server: a check before the server answered was
    # logged and dropped, and the empty bot answered with its fallback until its cron, that night at 03:00.
    import gateway.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "STARTUP_RETRY_S", 0.01)
    docs = _one_document(tmp_path)
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "good", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}]}
    async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
        count = knowledge.index.count
        refusals = iter([ConnectionRefusedError("qdrant:6333"), ConnectionRefusedError("qdrant:6333")])

        async def starting_server(name):
            if (refusal := next(refusals, None)) is not None:
                raise refusal
            return await count(name)

        monkeypatch.setattr(knowledge.index, "count", starting_server)
        scheduler = IngestScheduler(settings, knowledge=knowledge)
        with structlog.testing.capture_logs() as logs:
            scheduler.start()
            await asyncio.wait_for(scheduler._first_ingest, 60)
        scheduler.shutdown()
        assert await count("acme") >= 1
    waits = [e["retry_in"] for e in logs if e["event"] == "ingest.startup_check_failed"]
    assert waits == [0.01, 0.02]
    assert [e["reason"] for e in logs if e["event"] == "ingest.startup_start"] == ["the collection is empty"]


async def test_a_scheduled_run_stopped_by_a_shutdown_is_no_error_of_the_scheduler(tmp_path, caplog):
    # A SIGTERM during a scheduled run: the ingester records it as cancelled and logs it as a warning, and
    # APScheduler logged the job's CancelledError as `error: Job "ingest acme/site …" raised an exception`
    # with its traceback, on every deploy or restart that met a run (an alert on error lines fired).
    import logging

    with caplog.at_level(logging.INFO, logger="apscheduler"):
        async with _scheduled_run_going(tmp_path) as (_, sessions, knowledge, scheduler):
            scheduler.shutdown()  # what `Services.stop` does first, then closes the knowledge base
            await knowledge.close()
            await asyncio.sleep(0.1)  # APScheduler's executor sees the job's end
            [run] = await runs(sessions)
    assert (run.status, run.errors) == ("failed", ["cancelled before it finished"])
    errors = [r for r in caplog.records if r.name.startswith("apscheduler") and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
