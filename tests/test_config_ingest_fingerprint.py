"""The admin ingest route: it refuses a job sent with another configuration than the server's (review
finding 7: the server would run it with what it loaded at start and silently ignore the caller's file),
and streams its progress to a CLI that asks for it."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.settings import load_settings
from tests.conftest import app_client, docs_source, write_config


async def test_config_admin_ingest_refuses_another_configuration_and_serves_old_clients(tmp_path):
    source = docs_source(tmp_path)
    bots = [{"name": "acme", "sources": [source], "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots) as client:
        svc = client.services
        headers = {"Authorization": f"Bearer {svc.admin_token}"}
        # The CLI reads the file again; a source added since changes the fingerprint.
        (tmp_path / "cli").mkdir()
        changed = load_settings(write_config(tmp_path / "cli", bots=[
            {**bots[0], "sources": [source, {**source, "name": "more"}]}]))
        refused = await client.post("/v1/admin/ingest", headers=headers,
                                    params={"config_fingerprint": changed.ingest_fingerprint()})
        assert refused.status_code == 409
        assert refused.json()["error"] == (
            f"the running server loaded {svc.settings.config_path} as it was at start; restart it to use the "
            "changed configuration, or stop it and run ingest again")

        same = await client.post("/v1/admin/ingest", headers=headers,
                                 params={"config_fingerprint": svc.settings.ingest_fingerprint()})
        assert same.status_code == 200 and [r["source"] for r in same.json()["runs"]] == ["help"]
        # An older CLI sends no fingerprint: the ingest runs as it always did.
        old = await client.post("/v1/admin/ingest", headers=headers)
        assert old.status_code == 200 and old.json()["runs"][0]["status"] == "ok"


async def test_admin_ingest_streams_progress_lines_then_the_runs(tmp_path):
    source = docs_source(tmp_path, {f"page-{i}.md": f"# Page {i}\n\nThe answer to question {i} is {i * 7}.\n"
                                    for i in range(3)})
    bots = [{"name": "acme", "sources": [source], "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots) as client:
        headers = {"Authorization": f"Bearer {client.services.admin_token}", "Accept": "application/x-ndjson"}
        async with client.stream("POST", "/v1/admin/ingest", headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            lines = [json.loads(line) async for line in response.aiter_lines() if line.strip()]
        progress = [line["progress"] for line in lines[:-1]]
        assert progress[-1] == {"done": 3, "total": 3, "label": "acme/help"}
        assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
        (run,) = lines[-1]["runs"]
        assert run["status"] == "ok" and run["added"] > 0

        # An unknown source is the same 404 as without streaming, before anything is streamed.
        missing = await client.post("/v1/admin/ingest", headers=headers, params={"source": "nope"})
        assert missing.status_code == 404 and missing.json()["error"] == "unknown source 'nope': no bot has it (the sources: help)"


async def test_admin_ingest_whose_caller_goes_away_still_ends_and_is_recorded(tmp_path):
    from sqlalchemy import select

    from gateway.http.admin import _progress_lines
    from storage.models import IngestRun
    from tests.gateway_channels.conftest import wait_until

    source = docs_source(tmp_path, {f"page-{i}.md": f"# Page {i}\n\nFact {i}.\n" for i in range(3)})
    async with app_client(tmp_path, bots=[{"name": "acme", "sources": [source], "channels": {"web": {}}}]) as client:
        knowledge = client.services.knowledge
        lines = _progress_lines(knowledge, bot=None, source=None)
        first = json.loads(await anext(lines))
        assert "progress" in first
        await lines.aclose()  # what Starlette does when the CLI's connection drops

        async def ended():
            async with client.services.sessions() as session:
                runs = (await session.execute(select(IngestRun))).scalars().all()
            return runs if runs and runs[0].status != "running" else None

        (run,) = await wait_until(ended, timeout=60, what="the abandoned ingest to end")
        assert run.status == "ok" and run.added > 0
        assert await knowledge.recorded_chunks("acme") == run.added


async def test_admin_ingest_that_breaks_mid_stream_ends_with_an_error_line(tmp_path):
    from gateway.http.admin import _progress_lines

    class Breaking:
        def start_ingest(self, *, bot, source, trigger, progress):
            async def ingest():
                progress(1, 2, "acme/help")
                raise RuntimeError("the store went away")
            return asyncio.ensure_future(ingest())

    lines = [json.loads(line) async for line in _progress_lines(Breaking(), bot=None, source=None)]
    assert lines == [{"progress": {"done": 1, "total": 2, "label": "acme/help"}},
                     {"error": "the ingest failed: RuntimeError: the store went away"}]


@pytest.mark.parametrize("body, shown", [
    (b'{"progress": {"done": 1, "total": 2, "label": "acme/help"}}\n{"error": "the ingest failed: boom"}\n',
     "stopped before the ingest ended (the ingest failed: boom)"),
    (b'{"progress": {"done": 1, "total": 2, "label": "acme/help"}}\n', "stopped before the ingest ended (no result came)"),
    (b'{"progress": {"done": 1}}\n[1, 2]\n', "stopped before the ingest ended (a line that is not an event: '[1, 2]')"),
], ids=["error-line", "cut-short", "not-an-object"])
async def test_cli_reads_a_broken_progress_stream_as_an_unfinished_ingest(body, shown, capsys):
    from gateway.admin_client import _ingest_on_server
    from tests.fakes.web_server import replaying_admin_ingest, serving

    app = replaying_admin_ingest(body)
    seen = []
    async with serving(app) as base:
        code = await _ingest_on_server(base, {}, token="t", progress=lambda *args: seen.append(args))
    assert code == 1 and seen[0][:2] == (1, 2 if b'"total": 2' in body else 0)
    assert shown in capsys.readouterr().err


async def test_a_quiet_ingest_streams_heartbeats_and_loses_no_counts(monkeypatch):
    """A page can take minutes (a Crawl-delay): the stream must not go silent that long."""
    from gateway.http import admin

    monkeypatch.setattr(admin, "HEARTBEAT_S", 0.05)

    class Slow:
        def start_ingest(self, *, bot, source, trigger, progress):
            async def ingest():
                await asyncio.sleep(0.3)  # the first page, fetched slowly
                progress(1, 2, "acme/help")
                await asyncio.sleep(0.3)
                progress(2, 2, "acme/help")
                return []
            return asyncio.ensure_future(ingest())

    lines = [json.loads(line) async for line in admin._progress_lines(Slow(), bot=None, source=None)]
    assert lines[-1] == {"runs": []}
    assert [line["progress"]["done"] for line in lines if "progress" in line] == [1, 2]
    beats = [i for i, line in enumerate(lines) if line == {"heartbeat": True}]
    assert len(beats) >= 4 and beats[0] == 0  # before the first count, and between the counts


async def test_cli_without_a_terminal_streams_too_and_waits_past_its_read_timeout(monkeypatch):
    """--json, cron, CI: no bar to draw, and the ingest may outlast the read timeout (it was one JSON
    answer, which had to come within an hour)."""
    from aiohttp import web

    from gateway import admin_client
    from tests.fakes.web_server import serving

    monkeypatch.setattr(admin_client, "READ_TIMEOUT_S", 0.3)
    asked = []

    async def ingest(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("Accept"))
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for _ in range(8):  # 0.8 s in all, far past the read timeout, a line every 0.1 s
            await asyncio.sleep(0.1)
            await response.write(b'{"heartbeat": true}\n')
        await response.write(b'{"runs": [{"bot": "acme", "source": "help"}]}\n')
        return response

    app = web.Application()
    app.router.add_post("/v1/admin/ingest", ingest)
    async with serving(app) as base:
        runs = await admin_client._ingest_on_server(base, {}, token="t", progress=None)
    assert asked == ["application/x-ndjson"] and runs == [{"bot": "acme", "source": "help"}]


async def test_admin_ingest_relays_its_warnings_and_only_its_own(monkeypatch, capsys):
    """A local ingest prints a warning (a sitemap's URLs on other sites skipped, a capped Crawl-delay) on the
    terminal; through the server it went only to the server's log. The CLI prints each as `warning: …`."""
    import logging

    from gateway.admin_client import _ingest_on_server
    from gateway.http import admin
    from tests.fakes.web_server import replaying_admin_ingest, serving

    crawl = logging.getLogger("rag.crawl")
    other_run_logged = asyncio.Event()

    async def another_run():  # a scheduled run's task, logging while the CLI's stream is open
        crawl.warning("another run's warning")
        other_run_logged.set()

    class Warns:
        def start_ingest(self, *, bot, source, trigger, progress):
            async def ingest():
                crawl.warning("sitemap.other_sites_skipped", extra={"sitemap": "http://user:s3cret@x/s.xml", "skipped": 1})
                await asyncio.to_thread(crawl.warning, "from a worker thread")
                crawl.warning("ingest.points_missing", extra={"missing": 3})
                crawl.warning("a failed page", extra={"in_run_errors": True})  # printed from its run instead
                await other_run_logged.wait()
                progress(1, 1, "acme/site")
                return []
            return asyncio.ensure_future(ingest())

    lines = admin._progress_lines(Warns(), bot=None, source=None)
    other = asyncio.create_task(another_run())
    lines = [json.loads(line) async for line in lines]
    await other
    assert lines == [
        {"warning": "sitemap.other_sites_skipped sitemap=http://user:[REDACTED]@x/s.xml skipped=1", "level": "warning"},
        {"warning": "from a worker thread", "level": "warning"},
        {"warning": "ingest.points_missing missing=3", "level": "warning"},
        {"progress": {"done": 1, "total": 1, "label": "acme/site"}}, {"runs": []}]

    app = replaying_admin_ingest("".join(json.dumps(line) + "\n" for line in lines).encode())
    async with serving(app) as base:
        assert await _ingest_on_server(base, {}, token="t", progress=None) == []
    err = capsys.readouterr().err
    assert "warning: sitemap.other_sites_skipped sitemap=http://user:[REDACTED]@x/s.xml skipped=1" in err
    assert "warning: ingest.points_missing missing=3" in err


async def test_admin_ingest_without_its_token_says_where_the_token_is(tmp_path):
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}]) as client:
        refused = await client.post("/v1/admin/ingest")
        token_file = client.services.admin_token_path.name
    # "admin token required" named neither the header nor the file: a newcomer trying the route was stuck.
    assert refused.status_code == 401
    assert refused.json()["error"] == (
        "admin token required: send Authorization: Bearer <token>, the token this server wrote at start to "
        f"{token_file} beside its index folder (`gateway ingest` on this machine reads it)")
