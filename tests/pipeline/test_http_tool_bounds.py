"""An http tool's answer is read up to a cap: a hostile or broken API cannot fill the server's memory.

A real server on loopback (at a free port) answers with a body larger than the cap, streamed,
and with a few hundred bytes that inflate to 200 MB (`Content-Encoding: gzip, gzip`); memory is measured
as the ingest's gzip bomb test measures it."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from contextlib import asynccontextmanager

from aiohttp import web

from gateway.models import CallerIdentity
from gateway.pipeline.tools import BotTools
from gateway.settings import BotSettings
from tests.fakes.web_server import serving
from tests.rag.test_crawl_safety import _gzipped_zeros

ALICE = CallerIdentity(bot="acme", channel="web", contact_external_id="alice")


@asynccontextmanager
async def hostile_api():
    """/bomb: 200 MB of zeros gzipped twice; /huge: 64 MB streamed 1 MB at a time; /fine: a small JSON
    answer gzipped once."""
    bomb = _gzipped_zeros(200 << 20, times=2)
    assert len(bomb) < 2_000

    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        piece = b"x" * (1 << 20)
        for _ in range(64):
            await response.write(piece)
        return response

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/bomb":
            return web.Response(body=bomb, headers={"Content-Encoding": "gzip, gzip", "Content-Type": "application/json"})
        if request.path == "/huge":
            return await huge(request)
        return web.Response(body=gzip.compress(json.dumps({"stock": 7}).encode()),
                            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serving(app) as base:
        yield base


async def test_an_http_tools_answer_past_its_cap_is_a_tool_error_not_the_servers_memory():
    async with hostile_api() as base:
        tools = BotTools(BotSettings(name="acme", tools=[
            {"name": name, "type": "http", "url": f"{base}/{name}", "timeout": 30} for name in ("bomb", "huge", "fine")]))
        tracemalloc.start()
        try:
            bomb = await tools.call("bomb", {}, identity=ALICE)
            huge = await tools.call("huge", {}, identity=ALICE)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        fine = await tools.call("fine", {}, identity=ALICE)
    assert peak < 32 << 20, f"{peak >> 20} MB held"
    assert bomb.result is None
    assert bomb.error == "response too large: the service's answer is compressed more than once " \
                         "(Content-Encoding: gzip, gzip); not read"
    assert huge.result is None
    assert huge.error == "response too large: the service's answer is larger than 4 MB; not read"
    assert (fine.error, fine.result) == (None, {"stock": 7})


async def test_an_http_tools_answer_gzipped_once_is_inflated_no_further_than_its_cap():
    """httpx inflates each received piece whole: 64 kB of gzipped zeros are 64 MB, so an answer gzipped once
    held 145 MB before the cap saw it. A deflate answer (with its zlib header, or raw) is read as before."""
    bomb = _gzipped_zeros(512 << 20, times=1)
    small = json.dumps({"stock": 7}).encode()
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    routes = {"/bomb": (bomb, "gzip"), "/zlib": (zlib.compress(small), "deflate"),
              "/raw": (packer.compress(small) + packer.flush(), "deflate")}

    async def handle(request: web.Request) -> web.Response:
        body, encoding = routes[request.path]
        return web.Response(body=body, headers={"Content-Encoding": encoding, "Content-Type": "application/json"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serving(app) as base:
        tools = BotTools(BotSettings(name="acme", tools=[
            {"name": name, "type": "http", "url": f"{base}/{name}", "timeout": 30}
            for name in ("bomb", "zlib", "raw")]))
        tracemalloc.start()
        try:
            bomb = await tools.call("bomb", {}, identity=ALICE)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        deflated = [await tools.call(name, {}, identity=ALICE) for name in ("zlib", "raw")]
    assert peak < 32 << 20, f"{peak >> 20} MB held"
    assert bomb.error == "response too large: the service's answer is larger than 4 MB; not read"
    assert [(d.error, d.result) for d in deflated] == [(None, {"stock": 7})] * 2
