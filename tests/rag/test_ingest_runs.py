"""Ingest runs in the store: a run a killed process left `running`, and what health and metrics show."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import httpx
from aiohttp import web
from sqlalchemy import select

from gateway.app import create_app
from gateway.settings import load_settings
from rag.ingest_runs import INTERRUPTED, IngestReport, latest_runs, record_run, start_run
from storage.models import IngestRun
from tests.conftest import app_client, upgrade, write_config
from tests.fakes.web_server import serving
from tests.rag.ingest_helpers import HangingSite, open_knowledge


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


async def test_a_runs_errors_are_stored_redacted_as_readyz_and_ingest_runs_show_them(tmp_path, monkeypatch, capsys):
    """A provider's 401 quoting the key LiteLLM read from the environment was redacted where it was shown, and
    stored whole in `ingest_runs`: anyone who reads the database (a backup, a support dump) read the key."""
    from gateway.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789")
    error = "AuthenticationError: Incorrect API key provided: sk-env-key-0123456789"
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}
    async with app_client(tmp_path, bots=[bot], start_worker=False) as client:
        sessions = client.services.sessions
        await record_run(sessions, IngestReport("acme", "docs", errors=[error], status="failed"), trigger="schedule")
        async with sessions() as session:
            [stored] = (await session.scalars(select(IngestRun.errors))).all()
        ready = (await client.get("/readyz")).json()["ingest"]["acme/docs"]
    said = "AuthenticationError: Incorrect API key provided: [REDACTED]"
    assert stored == [said] and ready["error"] == said
    assert await asyncio.to_thread(main, ["ingest-runs", "--config", str(tmp_path / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"    ! {said}\n" in out and "sk-env-key" not in out


async def test_a_run_a_killed_process_left_running_is_marked_interrupted_when_the_server_starts(tmp_path):
    """A `kill -9` mid-ingest left its row `running` until the next run of its source ended, often the next night."""
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}
    settings = load_settings(write_config(tmp_path, bots=[bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    async with app.router.lifespan_context(app):
        killed = await start_run(app.state.services.sessions, "acme", "docs", trigger="schedule")
    app = create_app(settings, start_scheduler=False)  # the server starts again
    async with app.router.lifespan_context(app):
        async with app.state.services.sessions() as session:
            row = await session.get(IngestRun, killed)
    assert (row.status, row.errors) == ("interrupted", [INTERRUPTED])


async def test_a_run_going_in_another_process_is_not_marked_interrupted_on_postgres(tmp_path, postgres_url):
    """A replica that starts while another one ingests must not call that run interrupted: it holds the source's lock."""
    from sqlalchemy import text

    from gateway.knowledge import Knowledge
    from gateway.leader import lock_key
    from storage.engine import create_engine, session_factory

    bot = {"name": "acme", "sources": [{"name": name, "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}
                                       for name in ("docs", "faq")]}
    settings = load_settings(write_config(tmp_path, database_url=postgres_url, bots=[bot]))
    await asyncio.to_thread(upgrade, postgres_url)
    engine = create_engine(postgres_url)
    sessions = session_factory(engine)
    try:
        going = await start_run(sessions, "acme", "docs", trigger="schedule")  # the other replica's run, going
        killed = await start_run(sessions, "acme", "faq", trigger="schedule")  # a run whose process was killed
        async with engine.connect() as other_replica:
            await other_replica.execute(text("SELECT pg_advisory_lock(:key)"), {"key": lock_key("ingest:acme/docs")})
            await Knowledge(settings, sessions=sessions).mark_interrupted_runs()
            await other_replica.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": lock_key("ingest:acme/docs")})
        async with sessions() as session:
            rows = {i: (await session.get(IngestRun, i)).status for i in (going, killed)}
    finally:
        await engine.dispose()
    assert rows == {going: "running", killed: "interrupted"}


async def test_the_next_run_of_a_source_marks_its_orphaned_run_interrupted_as_it_starts(tmp_path):
    async with HangingSite() as site:
        bot = {"name": "acme", "sources": [{"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 3 * * *"}]}
        async with open_knowledge(tmp_path, bot) as (_, sessions, knowledge):
            killed = await start_run(sessions, "acme", "site", trigger="schedule")
            run = asyncio.create_task(knowledge.ingest_source("acme", "site"))
            await asyncio.wait_for(site.asked.wait(), 30)  # the new run is going: the old one is no longer "running"
            async with sessions() as session:
                status = (await session.get(IngestRun, killed)).status
            site.release.set()
            await asyncio.wait_for(run, 60)
    assert status == "interrupted"


async def test_readyz_shows_a_run_going_beside_the_last_one_that_ended(tmp_path):
    """/readyz showed a source's last finished run alone: through a crawl of hours, nothing said one was going."""
    async with HangingSite() as site:
        bot = {"name": "acme", "sources": [{"name": "site", "type": "urls", "urls": [site.url], "schedule": "0 3 * * *"}]}
        async with app_client(tmp_path, bots=[bot], start_worker=False) as client:
            site.release.set()
            await client.services.knowledge.ingest_source("acme", "site", trigger="cli")
            ended = (await client.get("/readyz")).json()["ingest"]["acme/site"]
            site.release, site.asked = asyncio.Event(), asyncio.Event()  # the next run waits on the page
            run = asyncio.create_task(client.services.knowledge.ingest_source("acme", "site", trigger="schedule"))
            await asyncio.wait_for(site.asked.wait(), 30)
            going = (await client.get("/readyz")).json()["ingest"]["acme/site"]
            site.release.set()
            await asyncio.wait_for(run, 60)
            after = (await client.get("/readyz")).json()["ingest"]["acme/site"]
    assert ended["status"] == "ok" and "running" not in ended
    running = going.pop("running")
    assert going == ended  # the last run that ended, as before
    assert running.pop("started_at") > ended["started_at"]
    assert running == {"trigger": "schedule", "pages_fetched": 0, "pages": 1}
    assert after["status"] == "ok" and after["started_at"] > ended["started_at"] and "running" not in after


async def test_readyz_shows_how_many_documents_a_run_going_has_stored(tmp_path, monkeypatch):
    import rag.ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nThe page {name} says hello.\n")
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}]}
    async with app_client(tmp_path, bots=[bot], start_worker=False, ingest=True) as client:
        for name in ("c", "d"):  # two new documents, the first two unchanged
            (docs / f"{name}.md").write_text(f"# {name}\n\nThe page {name} says hello.\n")
        writing, release = asyncio.Event(), asyncio.Event()
        write_points = rag.ingest.write_points

        async def held(*args, **kwargs):
            writing.set()
            await release.wait()
            return await write_points(*args, **kwargs)

        monkeypatch.setattr(rag.ingest, "write_points", held)
        run = asyncio.create_task(client.services.knowledge.ingest_source("acme", "docs", trigger="cli"))
        await asyncio.wait_for(writing.wait(), 30)
        running = (await client.get("/readyz")).json()["ingest"]["acme/docs"]["running"]
        release.set()
        assert (await asyncio.wait_for(run, 60)).added > 0
    assert (running["trigger"], running["documents_done"], running["documents"]) == ("cli", 2, 4)


@asynccontextmanager
async def _cancelled_once_its_row_is_written(tmp_path, monkeypatch, *, then_s: float):
    """A directory source's ingest, cancelled as soon as its run's row is written, whose start then takes `then_s`
    more seconds (its session closing); yields (the ingest task, the store's sessions), the knowledge still open."""
    import rag.ingest as ingest_module
    import rag.ingest_runs as runs_module

    written = asyncio.Event()

    async def slow_after_writing(*args, **kwargs) -> int:
        run_id = await start_run(*args, **kwargs)
        written.set()
        await asyncio.sleep(then_s)
        return run_id

    monkeypatch.setattr(runs_module, "start_run", slow_after_writing)
    monkeypatch.setattr(ingest_module, "start_run", slow_after_writing)  # where it was called from before
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text.\n")
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [{"name": "docs", "type": "directory", "path": str(docs)}]}
    async with open_knowledge(tmp_path, bot) as (_, sessions, knowledge):
        ingest = asyncio.create_task(knowledge.ingest_source("acme", "docs"))
        await asyncio.wait_for(written.wait(), timeout=60)
        ingest.cancel()
        yield ingest, sessions


async def test_a_run_cancelled_as_its_row_is_written_is_recorded_as_cancelled_not_left_running(tmp_path, monkeypatch):
    """A stop that lands as the run's row is written (CI caught one as its session closed, after the commit) cut
    the start off, and nothing recorded the run's end: it stayed `running` until the source's next run."""
    async with _cancelled_once_its_row_is_written(tmp_path, monkeypatch, then_s=0.5) as (ingest, sessions):
        await asyncio.wait({ingest}, timeout=60)
        assert ingest.cancelled()  # recorded, and still cancelled
        async with sessions() as session:
            [run] = (await session.execute(select(IngestRun))).scalars().all()
    assert (run.status, run.errors) == ("failed", ["cancelled before it finished"])


async def test_a_cancelled_start_is_waited_for_a_bounded_time(tmp_path, monkeypatch):
    """The row's write is waited for after a cancel, but not for as long as a slow database takes (a stopping
    `gateway ingest` ignores a second SIGTERM): past `START_AFTER_CANCEL_S` the cancel goes on."""
    import rag.ingest_runs as runs_module

    monkeypatch.setattr(runs_module, "START_AFTER_CANCEL_S", 0.5)
    async with _cancelled_once_its_row_is_written(tmp_path, monkeypatch, then_s=600) as (ingest, _):
        done, _ = await asyncio.wait({ingest}, timeout=30)  # not the 600 s the session would take to close
        assert done and ingest.cancelled()


async def test_a_runs_errors_are_stored_and_sent_redacted(sessions, tmp_path, monkeypatch):
    """An error quoting a key the server's environment holds (OPENAI_API_KEY, for `embedding.model: litellm/…`)
    was stored and sent whole: `gateway ingest-runs`, or `gateway ingest` through the server, run from a shell
    without that variable, could not know it as a secret and printed it."""
    from gateway.observability.logs import configure_logging_for

    key = "sk-proj-server-env-key-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    configure_logging_for(load_settings(write_config(tmp_path)), level="WARNING", fmt="json")  # the server's
    report = IngestReport("acme", "docs", errors=[f"AuthenticationError: Incorrect API key provided: {key}"])
    run = await start_run(sessions, "acme", "docs", trigger="admin")
    await record_run(sessions, report, trigger="admin", run_id=run)
    sent = report.as_dict()["errors"]
    async with sessions() as session:
        stored = (await session.get(IngestRun, run)).errors
    assert sent == stored == ["AuthenticationError: Incorrect API key provided: [REDACTED]"]


async def test_errors_an_older_gateway_stored_whole_are_redacted_where_they_are_read(tmp_path, monkeypatch, capsys):
    """Rows written before errors were stored redacted (or with a key only a newer gateway knows to redact, HF_TOKEN)
    hold the key whole: /readyz and `gateway ingest-runs` (its lines and --json) redact them as they read them."""
    from gateway.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_envtoken0123456789abcd")
    monkeypatch.setenv("WIKI_PASS", "wiki-pass-0123456789")
    error = ("AuthenticationError: Invalid token hf_envtoken0123456789abcd; "
             "https://reader:wiki-pass-0123456789@wiki.example.com/p: answered 401")
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}
    async with app_client(tmp_path, bots=[bot], start_worker=False) as client:
        sessions = client.services.sessions
        async with sessions() as session:  # as an older gateway wrote it: the error whole
            session.add(IngestRun(bot="acme", source="docs", trigger="schedule", status="failed", errors=[error],
                                  duration_s=1.0))
            await session.commit()
        ready = (await client.get("/readyz")).json()["ingest"]["acme/docs"]
    said = "AuthenticationError: Invalid token [REDACTED]; https://reader:[REDACTED]@wiki.example.com/p: answered 401"
    assert ready["error"] == said
    config = str(tmp_path / "config.yaml")
    assert await asyncio.to_thread(main, ["ingest-runs", "--config", config]) == 0
    assert await asyncio.to_thread(main, ["ingest-runs", "--config", config, "--json"]) == 0
    out = capsys.readouterr().out
    assert f"    ! {said}\n" in out and f'"errors": ["{said}"]' in out
    assert "hf_envtoken" not in out and "wiki-pass" not in out
