"""A run that waits for one of the process's `MAX_SOURCE_RUNS` run slots says so, naming the runs holding them,
as does the next cron of its source, skipped behind it; /readyz shows the run waiting."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone

import structlog

from gateway.knowledge import MAX_SOURCE_RUNS
from gateway.scheduler import IngestScheduler
from tests.rag.ingest_helpers import HangingSite, open_knowledge, runs


async def _until(condition, what: str) -> None:
    for _ in range(500):
        if await condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _sources(site: HangingSite) -> list[dict]:
    """One more urls source than there are slots, each a page of `site`."""
    return [{"name": f"site{i}", "type": "urls", "urls": [f"{site.url}?{i}"], "schedule": "0 4 * * 1"}
            for i in range(MAX_SOURCE_RUNS + 1)]


async def _last_waits_for_a_slot(knowledge, site: HangingSite, sources: list[dict]) -> list[asyncio.Task]:
    """Scheduled runs of every source but the last, holding every slot on `site`'s pages, then a `gateway ingest`
    run of the last, which waits for one; the runs' tasks."""
    going = [asyncio.create_task(knowledge.ingest_source("acme", s["name"], trigger="schedule")) for s in sources[:-1]]

    async def slots_taken():
        return site.holding == MAX_SOURCE_RUNS

    await _until(slots_taken, "every slot to be taken")
    going.append(asyncio.create_task(knowledge.ingest_source("acme", sources[-1]["name"], trigger="cli")))
    await asyncio.sleep(0.1)
    return going


async def test_a_scheduled_run_skipped_while_the_last_one_waits_for_a_slot_says_so_and_names_the_runs_holding_them(
        tmp_path):
    # The previous scheduled run had not started, all slots held by other sources' crawls: the skipped run said
    # "the previous scheduled run of this source was still going", and the user looked for a run that was not there.
    async with HangingSite() as site:
        sources = _sources(site)
        last = sources[-1]["name"]
        bot = {"name": "acme", "channels": {"web": {}}, "sources": sources}
        async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
            scheduler = IngestScheduler(settings, knowledge=knowledge)
            scheduler._scheduler.start()  # the cron clock alone: the empty collection's start-up runs would hang too

            def fire(name: str) -> None:
                scheduler._scheduler.modify_job(f"acme/{name}", next_run_time=datetime.now(timezone.utc))

            try:
                for source in sources[:-1]:
                    fire(source["name"])

                async def slots_taken():
                    return site.holding == MAX_SOURCE_RUNS

                await _until(slots_taken, "every slot to be taken")
                fire(last)

                async def waiting():
                    return knowledge.holder("acme", last) is not None

                await _until(waiting, f"{last}'s scheduled run to wait for a slot")
                with structlog.testing.capture_logs() as logs:
                    fire(last)

                    async def skipped():
                        return any(r.status == "skipped" for r in await runs(sessions))

                    await _until(skipped, "the skipped run to be recorded")
                [recorded] = [r for r in await runs(sessions) if r.status == "skipped"]
            finally:
                site.release.set()
                scheduler.shutdown()
    held = ", ".join(rf"acme/site{i} \(scheduled, since \d\d:\d\d:\d\d UTC\)" for i in range(MAX_SOURCE_RUNS))
    why = (rf"not run: the previous scheduled run of this source was still waiting for one of the {MAX_SOURCE_RUNS} "
           rf"ingest slots \(runs of different sources at once\), held by {held}")
    assert recorded.source == last and re.fullmatch(why, recorded.errors[0]), recorded.errors
    [logged] = [e for e in logs if e["event"] == "ingest.scheduled_skipped"]
    assert logged["why"] == recorded.errors[0]


async def test_readyz_shows_a_run_waiting_for_a_slot_and_the_runs_holding_them(tmp_path):
    # A run waiting for a slot has no `running` row yet: /readyz showed its source as idle while it waited.
    from tests.conftest import app_client

    async with HangingSite() as site:
        sources = _sources(site)
        async with app_client(tmp_path, bots=[{"name": "acme", "sources": sources}], start_worker=False) as client:
            going = await _last_waits_for_a_slot(client.services.knowledge, site, sources)
            ingest = (await client.get("/readyz")).json()["ingest"]
            site.release.set()
            await asyncio.wait_for(asyncio.gather(*going), 60)
    holding = [f"acme/site{i}" for i in range(MAX_SOURCE_RUNS)]
    assert all(ingest[label]["running"]["trigger"] == "schedule" and "waiting" not in ingest[label] for label in holding)
    waiting = ingest[f"acme/site{MAX_SOURCE_RUNS}"]
    assert "running" not in waiting and waiting["status"] == "never run"
    assert waiting["waiting"].pop("since").endswith("+00:00")
    assert waiting["waiting"] == {"trigger": "cli", "slots_held_by": holding}


async def test_a_run_that_waits_for_a_slot_says_so_and_names_the_runs_holding_them(tmp_path, caplog):
    # A `gateway ingest` behind four crawls of other sources sat without a word until one of them ended.
    async with HangingSite() as site:
        sources = _sources(site)
        async with open_knowledge(tmp_path, {"name": "acme", "channels": {"web": {}}, "sources": sources}) as (
                _, _, knowledge):
            going = await _last_waits_for_a_slot(knowledge, site, sources)
            said = [r for r in caplog.records if "slots" in r.getMessage()]
            site.release.set()
            await asyncio.wait_for(asyncio.gather(*going), 60)
    [waiting] = said
    assert waiting.levelname == "WARNING"  # a warning: relayed to the terminal of a CLI that ingests through a server
    held = ", ".join(f"acme/site{i}" for i in range(MAX_SOURCE_RUNS))
    assert waiting.getMessage() == (f"acme/site{MAX_SOURCE_RUNS}: the {MAX_SOURCE_RUNS} ingest slots (runs of different "
                                    f"sources at once) are all taken, by {held}; this run starts when one is free")
