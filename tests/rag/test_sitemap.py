"""Reading a sitemap from a real local site: where it is parsed, and what its `<lastmod>` saves."""

from __future__ import annotations

import threading

import httpx
from aiohttp import web

from rag.sources import load_sitemap
from tests.fakes.web_server import PAGE, serving


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
        self.news: dict[str, str | None] = {}  # what /news-sitemap.xml lists
        self.version = "v1"  # of every page: its ETag and its text
        self.requested: list[str] = []
        self.base = ""
        self.before_xml = ""  # what the sitemap's body holds before its XML

    def serving(self):
        app = web.Application()
        app.router.add_get("/sitemap.xml", self._sitemap)
        app.router.add_get("/news-sitemap.xml", self._news)
        app.router.add_get("/p/{name}", self._page)
        return serving(app)

    async def _sitemap(self, request: web.Request) -> web.Response:
        self.requested.append(request.path)
        return web.Response(text=self.before_xml + urlset(self.base, self.listed), content_type="application/xml")

    async def _news(self, request: web.Request) -> web.Response:
        self.requested.append(request.path)
        return web.Response(text=urlset(self.base, self.news), content_type="application/xml")

    async def _page(self, request: web.Request) -> web.Response:
        """Each page with an ETag, and a 304 to a GET that has it, as a web server does."""
        self.requested.append(request.path)
        etag = f'"{self.version}"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304)
        changed = "" if self.version == "v1" else f"<p>Changed in {self.version}.</p>"
        text = PAGE.format(request.match_info["name"]).replace("</main>", f"{changed}</main>")
        return web.Response(text=text, content_type="text/html", headers={"ETag": etag})


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


async def test_a_page_whose_sitemap_lastmod_has_not_changed_is_not_fetched_again(tmp_path):
    """Every scheduled run fetched every page of the sitemap (conditionally at best), `<lastmod>` unread."""
    from tests.rag.ingest_helpers import open_knowledge

    site = SitemapSite()
    async with site.serving() as base:
        site.base = base
        site.listed = {"/p/billing": "2026-11-01", "/p/refunds": "2026-11-02T10:00:00+00:00", "/p/plans": None}
        bot = {
            "name": "acme",
            "sources": [{"name": "site", "type": "sitemap", "url": f"{base}/sitemap.xml", "schedule": "0 3 * * *"}],
        }
        async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
            first = await knowledge.ingest_source("acme", "site")
            site.requested.clear()
            second = await knowledge.ingest_source("acme", "site")
            assert site.requested == ["/sitemap.xml", "/p/plans"]  # a page with no <lastmod> is still fetched
            site.listed["/p/refunds"] = "2026-11-20T08:30:00Z"  # changed since it was read: fetched
            site.requested.clear()
            third = await knowledge.ingest_source("acme", "site")
            assert sorted(site.requested) == ["/p/plans", "/p/refunds", "/sitemap.xml"]
            site.requested.clear()
            fourth = await knowledge.ingest_source("acme", "site")  # the new <lastmod> was kept
            assert site.requested == ["/sitemap.xml", "/p/plans"]
    assert (first.status, first.documents) == ("ok", 3) and first.added > 0
    for run in (second, third, fourth):  # the skipped pages keep their chunks; the fetched ones are unchanged
        assert (run.status, run.added, run.updated, run.deleted, run.unchanged) == ("ok", 0, 0, 0, first.added)


async def test_a_lastmod_that_cannot_be_relied_on_is_ignored_and_the_page_fetched():
    """Today's date (the page may change again today), a moment in the future, a lastmod not in W3C form,
    and a sitemap that gives every page one and the same lastmod (a build stamp) all say nothing."""
    from datetime import datetime, timedelta, timezone

    from rag.sitemap import sitemap_urls

    now = datetime.now(timezone.utc)
    hour_ago = (now - timedelta(hours=1)).isoformat()
    site = SitemapSite()
    async with site.serving() as base, httpx.AsyncClient(timeout=5) as client:
        site.base = base
        site.listed = {
            "/p/a": "2026-01-05",
            "/p/b": now.date().isoformat(),
            "/p/c": (now + timedelta(hours=2)).isoformat(),
            "/p/d": "last tuesday",
            "/p/e": None,
            "/p/f": hour_ago,
        }
        listing = await sitemap_urls(f"{base}/sitemap.xml", client=client, depth=0, errors=[])
        site.listed = dict.fromkeys(("/p/a", "/p/b", "/p/c"), "2026-01-05")
        stamped = await sitemap_urls(f"{base}/sitemap.xml", client=client, depth=0, errors=[])
    assert listing == {
        f"{base}/p/a": "2026-01-05",
        f"{base}/p/b": None,
        f"{base}/p/c": None,
        f"{base}/p/d": None,
        f"{base}/p/e": None,
        f"{base}/p/f": hour_ago,
    }
    assert set(stamped.values()) == {None}


async def test_a_page_answered_304_after_its_lastmod_moved_keeps_the_new_lastmod(tmp_path):
    """A CMS that moves `<lastmod>` without changing the page: the 304 kept the old one, so the page was asked
    for again on every run."""
    from tests.rag.ingest_helpers import open_knowledge

    site = SitemapSite()
    async with site.serving() as base:
        site.base = base
        site.listed = {"/p/billing": "2026-11-01", "/p/refunds": "2026-11-02"}
        bot = {
            "name": "acme",
            "sources": [{"name": "site", "type": "sitemap", "url": f"{base}/sitemap.xml", "schedule": "0 3 * * *"}],
        }
        async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
            await knowledge.ingest_source("acme", "site")
            site.listed["/p/billing"] = "2026-11-20"
            site.requested.clear()
            moved = await knowledge.ingest_source("acme", "site")
            assert site.requested == ["/sitemap.xml", "/p/billing"]  # asked conditionally: 304
            site.requested.clear()
            settled = await knowledge.ingest_source("acme", "site")
    assert site.requested == ["/sitemap.xml"]
    assert moved.status == settled.status == "ok" and moved.unchanged == settled.unchanged > 0


async def test_a_lastmod_is_relied_on_only_once_the_whole_span_it_names_is_over():
    """`2026-12-06T10:00Z` (W3C: minutes) names a minute: a page read at 10:00:20 and changed again at 10:00:40
    keeps that `<lastmod>`, so it was never read again. An ISO week (`2026-W49`) or an hour (`…T10`), which
    are not W3C and which `datetime.fromisoformat` reads as their first day or moment, did the same for
    the rest of that week or hour."""
    import asyncio
    from datetime import datetime, timedelta, timezone

    from rag.sitemap import sitemap_urls

    if datetime.now(timezone.utc).second >= 55:  # this minute must still be going when the sitemap is read
        await asyncio.sleep(6)
    now = datetime.now(timezone.utc)
    this_minute = now.strftime("%Y-%m-%dT%H:%MZ")
    minute_ago = (now - timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%MZ")
    site = SitemapSite()
    async with site.serving() as base, httpx.AsyncClient(timeout=5) as client:
        site.base = base
        site.listed = {"/p/a": this_minute, "/p/b": minute_ago, "/p/c": now.strftime("%G-W%V"),
                       "/p/d": now.strftime("%Y-%m-%dT%H"), "/p/e": "2026-01-05T10:00:00+01:00"}
        listing = await sitemap_urls(f"{base}/sitemap.xml", client=client, depth=0, errors=[])
    assert listing == {f"{base}/p/a": None, f"{base}/p/b": minute_ago, f"{base}/p/c": None, f"{base}/p/d": None,
                       f"{base}/p/e": "2026-01-05T10:00:00+01:00"}


async def test_a_page_two_sitemaps_list_is_read_again_when_one_of_them_says_it_changed(tmp_path):
    """One sitemap still giving the page's old `<lastmod>` made it `not_modified`, and that beat the page the
    other sitemap's new `<lastmod>` had fetched: its new text was dropped on every run, the old chunks kept."""
    from tests.rag.ingest_helpers import open_knowledge

    site = SitemapSite()
    async with site.serving() as base:
        site.base = base
        site.listed = site.news = {"/p/billing": "2026-11-01"}
        bot = {"name": "acme", "sources": [{"name": "site", "type": "sitemap", "url": f"{base}/sitemap.xml",
                                            "urls": [f"{base}/news-sitemap.xml"], "schedule": "0 3 * * *"}]}
        async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
            first = await knowledge.ingest_source("acme", "site")
            site.version, site.news = "v2", {"/p/billing": "2026-11-20"}  # changed; /sitemap.xml lags behind
            second = await knowledge.ingest_source("acme", "site")
    assert first.status == second.status == "ok" and first.added > 0
    assert second.updated > 0, second


async def test_a_sitemap_with_blank_lines_before_its_xml_declaration_is_read():
    """WordPress sites often send a plugin's stray newlines first; lxml refused the sitemap, and the source failed."""
    site = SitemapSite()
    async with site.serving() as base, httpx.AsyncClient(timeout=5) as client:
        site.base, site.listed, site.before_xml = base, {"/p/billing": None}, "\ufeff\n\n  "
        result = await load_sitemap(f"{base}/sitemap.xml", client=client)
    assert [d.title for d in result.documents] == ["billing"]
