"""Ingest runs in the store: a run a killed process left `running`, and what health and metrics show."""

from __future__ import annotations

import asyncio

import httpx
from aiohttp import web

from gateway.app import create_app
from gateway.settings import load_settings
from rag.ingest_runs import INTERRUPTED, IngestReport, latest_runs, record_run, start_run
from storage.models import IngestRun
from tests.conftest import app_client, upgrade, write_config
from tests.fakes.web_server import serving


async def test_a_run_left_running_by_a_killed_process_is_marked_interrupted_by_the_next(sessions):
    killed = await start_run(sessions, "acme", "docs", trigger="schedule")  # never recorded: the process died
    other_source = await start_run(sessions, "acme", "faq", trigger="schedule")
    run = await start_run(sessions, "acme", "docs", trigger="schedule")
    await record_run(sessions, IngestReport("acme", "docs", unchanged=4), trigger="schedule", run_id=run)
    async with sessions() as session:
        rows = {i: await session.get(IngestRun, i) for i in (killed, other_source, run)}
    assert (rows[killed].status, rows[killed].errors) == ("interrupted", [INTERRUPTED])
    assert rows[other_source].status == "running"  # another source's run is its own business
    assert rows[run].status == "ok"
    assert {key: r.id for key, r in (await latest_runs(sessions)).items()} == {("acme", "docs"): run}


async def test_readyz_and_metrics_show_a_failing_source(tmp_path):
    bot = {"name": "acme", "sources": [{"name": "gone", "type": "directory", "path": str(tmp_path / "missing"),
                                        "schedule": "0 3 * * *"}]}
    settings = load_settings(write_config(tmp_path, bots=[bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
            assert (await client.get("/readyz")).json()["ingest"] == {"acme/gone": {"status": "never run"}}
            [report] = await app.state.services.knowledge.ingest()
            assert report.status == "failed"
            ready = await client.get("/readyz")
            metrics = (await client.get("/metrics")).text
    assert ready.status_code == 200  # the service still answers; the source is reported, not fatal
    gone = ready.json()["ingest"]["acme/gone"]
    assert gone["status"] == "failed" and "knowledge directory not found" in gone["error"] and gone["errors"] == 1
    assert 'gateway_ingest_last_run_ok{bot="acme",source="gone"} 0.0' in metrics


async def test_readyz_shows_a_failing_sources_error_without_the_password_in_its_url(tmp_path):
    """/readyz answers anyone; the error of a sitemap whose URL carries a password named it whole."""
    async def broken(_request: web.Request) -> web.Response:
        return web.Response(status=500, text="down")

    app_ = web.Application()
    app_.router.add_get("/{tail:.*}", broken)
    async with serving(app_) as base:
        url = base.replace("http://", "http://docs-reader:pw-9f8e7d6c5b@") + "/sitemap.xml"
        bot = {"name": "acme", "sources": [{"name": "docs", "type": "sitemap", "url": url, "schedule": "0 3 * * *"}]}
        async with app_client(tmp_path, bots=[bot], start_worker=False) as client:
            [report] = await client.services.knowledge.ingest()
            ready = await client.get("/readyz")
    assert report.status == "failed" and "pw-9f8e7d6c5b" in report.errors[-1]  # the operator's own CLI shows it
    docs = ready.json()["ingest"]["acme/docs"]
    assert docs["status"] == "failed" and "docs-reader:[REDACTED]@" in docs["error"]
    assert "pw-9f8e7d6c5b" not in ready.text
