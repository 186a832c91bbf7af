"""The admin ingest route: it refuses a job sent with another configuration than the server's (review
finding 7: the server would run it with what it loaded at start and silently ignore the caller's file),
and streams its progress to a CLI that asks for it."""

from __future__ import annotations

import json

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
        assert missing.status_code == 404 and missing.json()["error"] == "unknown source 'nope': no bot has it"


async def test_admin_ingest_whose_caller_goes_away_still_ends_and_is_recorded(tmp_path):
    import asyncio

    from gateway.http.admin import _RUNNING, _progress_lines

    source = docs_source(tmp_path, {f"page-{i}.md": f"# Page {i}\n\nFact {i}.\n" for i in range(3)})
    async with app_client(tmp_path, bots=[{"name": "acme", "sources": [source], "channels": {"web": {}}}]) as client:
        knowledge = client.services.knowledge
        lines = _progress_lines(knowledge, bot=None, source=None)
        first = json.loads(await anext(lines))
        assert "progress" in first
        await lines.aclose()  # what Starlette does when the CLI's connection drops
        (task,) = _RUNNING
        (report,) = await asyncio.wait_for(task, 60)
        assert report.status == "ok" and report.added > 0
        assert await knowledge.recorded_chunks("acme") == report.added
