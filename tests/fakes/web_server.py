"""A real aiohttp server on loopback for a test: the sites, sitemaps and services the code under test calls."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

PAGE = "<html><head><title>{0}</title></head><body><main><h1>{0}</h1><p>All about {0} for customers.</p></main></body></html>"
"""A short HTML page named `{0}` (`PAGE.format(name)`): its title, heading and one paragraph."""


def closed_port() -> int:
    """A loopback port nothing listens on: one the system just gave out and took back (a fixed one may be
    another program's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a free port; yields its base URL (`http://127.0.0.1:PORT`)."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def replaying_admin_ingest(body: bytes, *, status: int = 200) -> web.Application:
    """A stand-in for a running server's `POST /v1/admin/ingest` that streams `body` (NDJSON lines) back,
    for the CLI that reads them; with another `status`, `body` is its JSON error (a refusal)."""

    async def ingest(request: web.Request) -> web.StreamResponse:
        if status != 200:
            return web.Response(status=status, body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(body)
        return response

    app = web.Application()
    app.router.add_post("/v1/admin/ingest", ingest)
    return app
