"""Reading a sitemap from a real local site: where it is parsed, and what its `<lastmod>` saves."""

from __future__ import annotations

import threading

import httpx
from aiohttp import web

from rag.sources import load_sitemap
from tests.fakes.web_server import serving

PAGE = "<html><head><title>{0}</title></head><body><main><h1>{0}</h1><p>All about {0} for customers.</p></main></body></html>"


def urlset(base: str, pages: dict[str, str | None]) -> str:
    """A sitemap of `pages` (path -> lastmod, or None for none)."""
    entries = "".join(
        f"<url><loc>{base}{path}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>" for path, mod in pages.items()
    )
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


class SitemapSite:
    """A real local site: /sitemap.xml lists `listed` (path -> lastmod); every page is HTML; it logs requests."""

    def __init__(self) -> None:
        self.listed: dict[str, str | None] = {}
        self.requested: list[str] = []
        self.base = ""

    def serving(self):
        app = web.Application()
        app.router.add_get("/sitemap.xml", self._sitemap)
        app.router.add_get("/p/{name}", self._page)
        return serving(app)

    async def _sitemap(self, request: web.Request) -> web.Response:
        self.requested.append(request.path)
        return web.Response(text=urlset(self.base, self.listed), content_type="application/xml")

    async def _page(self, request: web.Request) -> web.Response:
        self.requested.append(request.path)
        return web.Response(text=PAGE.format(request.match_info["name"]), content_type="text/html")


async def test_a_sitemap_is_parsed_off_the_event_loop(monkeypatch):
    """Pages and PDFs were parsed in a thread, the sitemap (up to 50 MB of XML) still on the event loop."""
    from lxml import etree

    parsed_on: list[int] = []
    real = etree.fromstring

    def spy(*args, **kwargs):
        parsed_on.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(etree, "fromstring", spy)
    site = SitemapSite()
    async with site.serving() as base, httpx.AsyncClient(timeout=5) as client:
        site.base, site.listed = base, {"/p/billing": None}
        result = await load_sitemap(f"{base}/sitemap.xml", client=client)
    assert [d.title for d in result.documents] == ["billing"]
    assert parsed_on and threading.get_ident() not in parsed_on
