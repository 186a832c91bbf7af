"""The Qdrant server's version, checked once at start against qdrant-client's: a clear log line with the
server's URL for a server that is too old or too new, or that does not answer; nothing in local mode.

The server here is a real HTTP server answering `GET /` as Qdrant does (`{"title", "version", "commit"}`).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import socket
import threading
import warnings

import pytest
from aiohttp import web

from gateway.settings import QdrantSettings
from rag.index import QdrantIndex
from tests.fakes.web_server import serving

CLIENT = importlib.metadata.version("qdrant-client")


def qdrant_root(version: str) -> web.Application:
    async def root(_request: web.Request) -> web.Response:
        return web.json_response({"title": "qdrant - vector search engine", "version": version, "commit": "0" * 40})

    app = web.Application()
    app.router.add_get("/", root)
    return app


def next_minor(version: str, step: int) -> str:
    major, minor, *_ = version.split(".")
    return f"{major}.{int(minor) + step}.0"


@pytest.mark.parametrize(("server", "compatible"), [
    (CLIENT, True),
    (next_minor(CLIENT, 1), True),  # one minor release apart: qdrant-client's own rule allows it
    (next_minor(CLIENT, 2), False),
    ("0.9.0", False),
])
async def test_a_server_of_another_release_is_named_with_its_url_and_version(server, compatible, caplog):
    async with serving(qdrant_root(server)) as url:
        index = QdrantIndex.from_settings(QdrantSettings(url=url, timeout=2))
        try:
            with caplog.at_level(logging.WARNING, logger="rag.index"):
                problem = await index.check_server_version()
        finally:
            await index.close()
    if compatible:
        assert problem is None and not caplog.records
    else:
        assert problem is not None and url in problem and server in problem and CLIENT in problem
        assert [r.problem for r in caplog.records if r.getMessage() == "qdrant.server_check_failed"] == [problem]


async def test_a_server_that_does_not_answer_is_logged_and_the_client_does_not_warn(caplog):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens: the port is bound, not listening
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            index = QdrantIndex.from_settings(QdrantSettings(url=url, timeout=1))
            try:
                with caplog.at_level(logging.WARNING, logger="rag.index"):
                    problem = await index.check_server_version()
                # qdrant-client's own check runs in a thread named after it, were there one: once it ended,
                # its warning would be recorded (a thread already ended has warned already).
                for thread in [t for t in threading.enumerate() if "_check_compatibility" in t.name]:
                    thread.join(timeout=30)
            finally:
                await index.close()
    assert problem is not None and "does not answer" in problem and url in problem
    assert [r.problem for r in caplog.records if r.getMessage() == "qdrant.server_check_failed"] == [problem]
    # qdrant-client's own check (a thread started with the client) would have warned without the URL.
    assert not [w for w in caught if "server version" in str(w.message)]


async def test_local_mode_has_no_server_to_check(tmp_path):
    index = QdrantIndex.from_settings(QdrantSettings(path=str(tmp_path / "qdrant")))
    try:
        assert await index.check_server_version() is None
    finally:
        await index.close()


async def test_the_knowledge_base_checks_its_server_when_it_opens_without_waiting_for_it(tmp_path, caplog):
    from gateway.knowledge import Knowledge
    from gateway.settings import load_settings
    from storage.engine import create_engine, session_factory
    from tests.conftest import write_config

    answer = asyncio.Event()

    async def slow_root(_request: web.Request) -> web.Response:
        await answer.wait()  # a server slow to answer must not hold up the start
        return web.json_response({"title": "qdrant - vector search engine", "version": "0.9.0"})

    app = web.Application()
    app.router.add_get("/", slow_root)
    async with serving(app) as url:
        settings = load_settings(write_config(tmp_path, qdrant={"url": url, "timeout": 10}))
        engine = create_engine(settings.database_url)
        knowledge = Knowledge(settings, sessions=session_factory(engine))
        try:
            with caplog.at_level(logging.WARNING, logger="rag.index"):
                await knowledge.open()
                checks = [t for t in asyncio.all_tasks() if t.get_name() == "qdrant-version-check"]
                assert len(checks) == 1 and not checks[0].done()
                answer.set()
                await checks[0]
        finally:
            await knowledge.close()
            await engine.dispose()
    assert [r for r in caplog.records if f"the Qdrant server at {url} runs 0.9.0" in getattr(r, "problem", "")]
