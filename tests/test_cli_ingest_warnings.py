"""`gateway ingest` through a running server prints the warnings the server's run logs, as a local ingest
does: every logger's, structlog's too, and only that run's."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging

from aiohttp import web

from gateway.admin_client import admin_files, ingest_via_server
from gateway.settings import load_settings
from rag.ingest_runs import start_run
from tests.conftest import app_client, docs_source, write_config
from tests.fakes.web_server import replaying_admin_ingest, serving


async def _answer_after_a_killed_run(tmp_path, bots, *, accept: str) -> bytes:
    """The real server's answer to an ingest (streamed or not) of a source whose last run a killed process
    left `running`: the next run marks it interrupted with a warning (`gateway.knowledge`, a structlog logger)."""
    (tmp_path / "server").mkdir()
    async with app_client(tmp_path / "server", bots=bots) as client:
        await start_run(client.services.sessions, "acme", "help", trigger="schedule")
        headers = {"Authorization": f"Bearer {client.services.admin_token}", "Accept": accept}
        async with client.stream("POST", "/v1/admin/ingest", headers=headers) as response:
            assert response.status_code == 200
            return await response.aread()


async def _cli_err(tmp_path, bots, app, capsys) -> str:
    """What the real CLI prints on stderr, ingesting through `app` (a stand-in server)."""
    settings = load_settings(write_config(tmp_path, bots=bots))
    async with serving(app) as base:
        token, url = admin_files(settings.qdrant.path)
        token.write_text("t")
        url.write_text(base)
        assert await ingest_via_server(settings, bot=None, source=None, as_json=True) == 0
    return capsys.readouterr().err


INTERRUPTED = "warning: ingest.runs_interrupted bot=acme source=help runs=1 why="


async def test_cli_ingest_through_the_server_prints_a_warning_its_run_logged_with_structlog(tmp_path, capsys):
    """A structlog warning of the run (runs a killed process left `running`, marked interrupted) reached
    only the server's log: only `rag`'s loggers were relayed."""
    bots = [{"name": "acme", "sources": [docs_source(tmp_path)], "channels": {"web": {}}}]
    body = await _answer_after_a_killed_run(tmp_path, bots, accept="application/x-ndjson")
    assert INTERRUPTED in await _cli_err(tmp_path, bots, replaying_admin_ingest(body), capsys)


async def test_a_server_answering_in_one_json_body_carries_the_warnings_and_the_cli_prints_them(tmp_path, capsys):
    """Without a stream (a caller that does not ask for NDJSON) the answer held the runs only."""
    bots = [{"name": "acme", "sources": [docs_source(tmp_path)], "channels": {"web": {}}}]
    answer = json.loads(await _answer_after_a_killed_run(tmp_path, bots, accept="application/json"))
    assert [w["level"] for w in answer["warnings"]] == ["warning"] and answer["runs"][0]["status"] == "ok"

    async def ingest(request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/admin/ingest", ingest)
    assert INTERRUPTED in await _cli_err(tmp_path, bots, app, capsys)


async def test_a_warning_of_any_library_during_a_streamed_ingest_is_relayed_and_others_are_not(tmp_path, monkeypatch):
    """Only `rag`'s loggers were relayed: a library's warning in the run (its database driver, its HTML
    parser) reached the server's log alone, while a local ingest prints it."""
    (tmp_path / "server").mkdir()
    bots = [{"name": "acme", "sources": [docs_source(tmp_path)], "channels": {"web": {}}}]
    async with app_client(tmp_path / "server", bots=bots) as client:
        knowledge = client.services.knowledge
        ingest_source = knowledge.ingest_source

        async def warning_first(bot, source, **kwargs):
            logging.getLogger("some.library").warning("pool.exhausted waited=%ss", 3)
            # Meanwhile, work of another request (a context of its own) warns too: not this run's.
            await asyncio.create_task(_warn("pool.exhausted for another request"), context=contextvars.Context())
            return await ingest_source(bot, source, **kwargs)

        monkeypatch.setattr(knowledge, "ingest_source", warning_first)
        headers = {"Authorization": f"Bearer {client.services.admin_token}", "Accept": "application/x-ndjson"}
        async with client.stream("POST", "/v1/admin/ingest", headers=headers) as response:
            body = (await response.aread()).decode()
    assert '{"warning": "pool.exhausted waited=3s", "level": "warning"}' in body.splitlines()
    assert "another request" not in body


async def _warn(message: str) -> None:
    logging.getLogger("some.library").warning(message)
