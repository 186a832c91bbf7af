"""Ingest of fetched pages against a real web server: conditional fetches and 304s, a failing page or
child sitemap that keeps its chunks, and a page that says it is gone (410)."""

from __future__ import annotations

from aiohttp import web

from gateway.settings import SourceSettings
from rag.ingest import Ingestor
from tests.fakes.web_server import serving
from tests.rag.ingest_helpers import CountingEmbedder, Site, page_html


async def test_url_pages_are_fetched_conditionally_and_a_304_keeps_their_chunks(index, dense, sparse, sessions):
    site = Site()
    async with site.serving() as base:
        site.pages = {
            "/billing": ('"v1"', None, page_html("Billing", "Invoices are sent on the first day of the month.")),
            "/refunds": (None, "Mon, 30 Nov 2026 09:00:00 GMT", page_html("Refunds", "Refunds reach the card in five days.")),
            "/news": (None, None, page_html("News", "The office is closed on public holidays.")),
        }
        source = SourceSettings(name="site", type="urls", urls=[f"{base}/billing", f"{base}/refunds", f"{base}/news"])
        counting = CountingEmbedder(dense)
        ingestor = Ingestor(index, counting, sparse, sessions)
        first = await ingestor.ingest_source("acme", source)
        assert first.status == "ok" and first.added > 0 and site.conditional == []

        site.log.clear()
        counting.calls.clear()
        again = await ingestor.ingest_source("acme", source)
        assert sorted(site.log) == [("/billing", 304), ("/news", 200), ("/refunds", 304)]
        assert (again.added, again.updated, again.deleted, again.unchanged) == (0, 0, 0, first.added)
        assert again.documents == 3 and counting.calls == [] and await index.count("acme") == first.added

        # A changed page is downloaded and re-embedded; its new ETag is what the next fetch sends.
        site.pages["/billing"] = ('"v2"', None, page_html("Billing", "Invoices are now sent on the fifth day."))
        site.log.clear()
        changed = await ingestor.ingest_source("acme", source)
        assert ("/billing", 200) in site.log and changed.updated > 0 and changed.deleted > 0
        site.log.clear()
        await ingestor.ingest_source("acme", source)
        assert ("/billing", 304) in site.log

        # Other chunk settings: the pages' chunks were made otherwise, so a 304 must not keep them.
        resized = Ingestor(index, counting, sparse, sessions, max_chunk_tokens=64, text_tokens=64)
        site.log.clear()
        site.conditional.clear()
        counting.calls.clear()
        rechunked = await resized.ingest_source("acme", source)
        assert site.conditional == [] and sorted(site.log) == [("/billing", 200), ("/news", 200), ("/refunds", 200)]
        assert rechunked.status == "ok" and counting.calls and rechunked.updated > 0
        site.log.clear()
        await resized.ingest_source("acme", source)  # its own validators are good again under its settings
        assert sorted(site.log) == [("/billing", 304), ("/news", 200), ("/refunds", 304)]

        # An index that lost its points needs the pages themselves: no conditional fetch then.
        await index.drop("acme")
        site.log.clear()
        site.conditional.clear()
        rebuilt = await ingestor.ingest_source("acme", source)
        assert site.conditional == [] and all(status == 200 for _, status in site.log)
        assert rebuilt.unchanged == 0 and await index.count("acme") > 0


async def test_a_page_or_child_sitemap_that_fails_keeps_the_chunks_it_had(index, dense, sparse, sessions):
    """A failing page is missing from the run, and a failing child sitemap hides which pages exist:
    neither may cost the chunks indexed before (they come back only when the page loads again)."""
    pages: dict[str, tuple[int, str, str]] = {}  # path -> (status, content type, body)

    async def handle(request: web.Request) -> web.Response:
        status, content_type, body = pages.get(request.path, (404, "text/plain", "not found"))
        return web.Response(status=status, text=body, content_type=content_type)

    app = web.Application()
    app.router.add_get("/{page}", handle)

    def urlset(*paths: str) -> str:
        locs = "".join(f"<url><loc>{base}{p}</loc></url>" for p in paths)
        return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'

    async with serving(app) as base:
        pages.update({
            "/sitemap.xml": (200, "application/xml", '<?xml version="1.0"?><sitemapindex xmlns="http://www.'
                             f'sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>{base}/one.xml</loc></sitemap>'
                             f'<sitemap><loc>{base}/two.xml</loc></sitemap></sitemapindex>'),
            "/one.xml": (200, "application/xml", urlset("/billing")),
            "/two.xml": (200, "application/xml", urlset("/refunds")),
            "/billing": (200, "text/html", page_html("Billing", "Invoices are sent on the first day of the month.")),
            "/refunds": (200, "text/html", page_html("Refunds", "Refunds reach the card in five days.")),
        })
        source = SourceSettings(name="site", type="sitemap", url=f"{base}/sitemap.xml")
        ingestor = Ingestor(index, dense, sparse, sessions)
        first = await ingestor.ingest_source("acme", source)
        assert first.status == "ok" and first.documents == 2
        total = await index.count("acme")

        pages["/two.xml"] = (503, "text/plain", "down")
        child_down = await ingestor.ingest_source("acme", source)
        assert child_down.status == "partial" and child_down.deleted == 0 and await index.count("acme") == total

        pages["/two.xml"] = (200, "application/xml", urlset("/refunds"))
        pages["/refunds"] = (500, "text/plain", "oops")
        page_down = await ingestor.ingest_source("acme", source)
        assert page_down.status == "partial" and page_down.deleted == 0 and await index.count("acme") == total

        pages["/two.xml"] = (200, "application/xml", urlset())  # the page is really gone: now it goes
        gone = await ingestor.ingest_source("acme", source)
        assert gone.status == "ok" and gone.deleted > 0 and await index.count("acme") < total


async def test_a_page_that_says_it_is_gone_is_removed_even_when_it_was_the_only_one(index, dense, sparse, sessions):
    """410 is the site saying so: the guard for a source that gives nothing does not hold it back."""
    status = {"code": 200}

    async def page(request: web.Request) -> web.Response:
        if status["code"] == 410:
            return web.Response(status=410, text="gone")
        return web.Response(text=page_html("Offer", "The winter offer ends in January."), content_type="text/html")

    app = web.Application()
    app.router.add_get("/offer", page)
    async with serving(app) as base:
        source = SourceSettings(name="site", type="urls", urls=[f"{base}/offer"])
        ingestor = Ingestor(index, dense, sparse, sessions)
        first = await ingestor.ingest_source("acme", source)
        status["code"] = 410
        gone = await ingestor.ingest_source("acme", source)
    assert first.added > 0 and gone.deleted == first.added and gone.status == "ok" and not gone.errors
    assert await index.count("acme") == 0


async def test_pages_are_counted_as_they_are_fetched_before_any_document_is_stored(index, dense, sparse, sessions):
    """A crawl under a Crawl-delay takes minutes before its first document is ingested; the bar showed
    nothing until then."""
    site = Site()
    async with site.serving() as base:
        site.pages = {f"/p{i}": (None, None, page_html(f"Page {i}", "Opening hours are nine to five.")) for i in range(3)}
        source = SourceSettings(name="site", type="urls", urls=[f"{base}/p{i}" for i in range(3)])
        events: list[tuple[str, int, int]] = []
        report = await Ingestor(index, dense, sparse, sessions).ingest_source(
            "acme", source, progress=lambda done, total: events.append(("documents", done, total)),
            fetch_progress=lambda done, total: events.append(("fetched", done, total)))
    assert report.status == "ok"
    fetched = [e for e in events if e[0] == "fetched"]
    assert fetched == [("fetched", 0, 3), ("fetched", 1, 3), ("fetched", 2, 3), ("fetched", 3, 3)]
    assert events.index(fetched[-1]) < next(i for i, e in enumerate(events) if e[0] == "documents")


async def test_a_run_whose_every_page_failed_keeps_the_pages_no_longer_listed(index, dense, sparse, sessions):
    """A `urls` list replaced by pages that all fail (a typo in the new URL, the site down) stored nothing, and
    yet deleted every page of the old list: a `failed` run emptied the bot's knowledge base, where README says a
    failed run's counts are all 0 and its chunks kept. They go on the next run that loads a page."""
    site = Site()
    async with site.serving() as base:
        site.pages = {"/billing": (None, None, page_html("Billing", "Invoices are sent on the first day of the month.")),
                      "/refunds": (None, None, page_html("Refunds", "Refunds reach the card in five days."))}
        ingestor = Ingestor(index, dense, sparse, sessions)
        old = SourceSettings(name="site", type="urls", urls=[f"{base}/billing", f"{base}/refunds"])
        first = await ingestor.ingest_source("acme", old)
        assert first.status == "ok" and (total := await index.count("acme")) > 0

        new = SourceSettings(name="site", type="urls", urls=[f"{base}/news"])  # not served yet: a 500
        failed = await ingestor.ingest_source("acme", new)
        assert failed.status == "failed" and (failed.deleted, failed.added) == (0, 0), failed.as_dict()
        assert failed.total == total and await index.count("acme") == total
        assert "no page loaded, so the 2 documents no longer listed were kept until one does" in failed.errors

        site.pages["/news"] = (None, None, page_html("News", "The office is closed on public holidays."))
        loaded = await ingestor.ingest_source("acme", new)
        assert loaded.status == "ok" and loaded.deleted == total and await index.count("acme") == loaded.added


async def test_a_directory_whose_only_file_left_fails_still_deletes_the_files_taken_out(tmp_path, index, dense, sparse,
                                                                                         sessions):
    """A run that loaded none of its documents keeps those no longer listed (a `urls` list whose new page failed),
    but a folder's listing is the folder: a file deleted beside one that cannot be read (a broken PDF) was kept,
    and served, for as long as that one stayed broken, with no word of it in the run."""
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "old-prices.md").write_text("# Old prices\n\nThe Starter plan costs 5 dollars a month.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not a pdf")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    assert first.status == "partial" and (total := await index.count("acme")) > 0

    (folder / "old-prices.md").unlink()
    second = await ingestor.ingest_source("acme", source)
    assert second.errors[0].startswith("broken.pdf") and second.deleted == total, second.as_dict()
    assert await index.count("acme") == 0
