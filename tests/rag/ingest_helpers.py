"""What the ingest tests share: an open Knowledge over a migrated store, an embedder that counts what it
is asked, the store's run records, the index's documents, a real web server whose pages carry HTTP validators, and
one whose page answers only when told to (a run held going)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from aiohttp import web
from qdrant_client import models as qm
from sqlalchemy import select

from gateway.knowledge import Knowledge
from gateway.settings import load_settings
from storage.engine import create_engine, session_factory
from storage.models import IngestRun
from tests.conftest import upgrade_new, write_config
from tests.fakes.web_server import serving


@asynccontextmanager
async def open_knowledge(tmp_path, bot: dict):
    """(settings, store sessions, an open Knowledge) for `bot` over a migrated SQLite store; closed after."""
    settings = load_settings(write_config(tmp_path, bots=[bot]))
    await asyncio.to_thread(upgrade_new, settings.database_url)
    engine = create_engine(settings.database_url)
    sessions = session_factory(engine)
    knowledge = Knowledge(settings, sessions=sessions)
    await knowledge.open()
    try:
        yield settings, sessions, knowledge
    finally:
        await knowledge.close()
        await engine.dispose()


class CountingEmbedder:
    """Wraps the real dense embedder and records every batch of texts it is asked to embed (ingest
    sends two per flush: the chunks' windows, then their sentences)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[list[str]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.calls for text in call]

    async def aembed_documents(self, texts):
        self.calls.append(list(texts))
        return await self.inner.aembed_documents(texts)


async def runs(sessions) -> list[IngestRun]:
    async with sessions() as session:
        return list((await session.scalars(select(IngestRun).order_by(IngestRun.id))).all())


async def point_documents(index, bot) -> list[str]:
    """Every indexed chunk's document, read through the engine-neutral query (exact dense: all points)."""
    arms = await index.hybrid_query(bot, [1.0] * 384, qm.SparseVector(indices=[1], values=[1.0]), prefetch=1000, limit=1)
    return sorted(p.payload["document"] for p in arms.dense)


class Site:
    """A real HTTP server whose pages carry validators (ETag and/or Last-Modified) and which answers a
    matching conditional GET with 304, as a web server does; it logs (path, status) per request."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str | None, str | None, str]] = {}  # path -> (etag, last-modified, html)
        self.log: list[tuple[str, int]] = []
        self.conditional: list[str] = []  # paths requested with a validator

    def serving(self):
        """Serve the site on a free local port: `async with site.serving() as base:`, then set `pages`."""
        app = web.Application()
        app.router.add_get("/{page}", self.handle)
        return serving(app)

    async def handle(self, request: web.Request) -> web.Response:
        etag, last_modified, html = self.pages[request.path]
        if request.headers.get("If-None-Match") or request.headers.get("If-Modified-Since"):
            self.conditional.append(request.path)
        unchanged = (request.headers.get("If-None-Match") == etag) if etag else \
            bool(last_modified) and request.headers.get("If-Modified-Since") == last_modified
        self.log.append((request.path, 304 if unchanged else 200))
        if unchanged:
            return web.Response(status=304)
        headers = {k: v for k, v in (("ETag", etag), ("Last-Modified", last_modified)) if v}
        return web.Response(text=html, content_type="text/html", headers=headers)


def page_html(title: str, body: str) -> str:
    paragraphs = "".join(f"<p>{body} Section {i} explains {title.lower()} in more detail for every plan.</p>" for i in range(3))
    return f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1>{paragraphs}</main></body></html>"


class HangingSite:
    """A web server whose page answers only once `release` is set; it counts the requests it holds."""

    def __init__(self) -> None:
        self.release, self.asked = asyncio.Event(), asyncio.Event()
        self.holding = self.most_at_once = 0
        self.url = ""

    async def _page(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.holding += 1
        self.most_at_once = max(self.most_at_once, self.holding)
        self.asked.set()
        await self.release.wait()
        body = b"<html><body><main><h1>Slow</h1><p>The slow page says hello to everyone.</p></main></body></html>"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        self.holding -= 1
        writer.close()

    async def __aenter__(self) -> HangingSite:
        self._server = await asyncio.start_server(self._page, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/slow"
        return self

    async def __aexit__(self, *exc) -> None:
        self.release.set()
        self._server.close()
