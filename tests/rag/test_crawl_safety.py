"""What fetched content points to may not leave its site, and no body is read without a bound.

Two real HTTP servers on loopback: the "public" site a source is configured with, and an "internal"
service on another port that nothing may reach through the public site's sitemap or redirects.
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import tracemalloc
import zlib
from collections.abc import Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

import rag.crawl
import rag.sitemap
from gateway.bot_settings import SourceSettings
from gateway.errors import SourceError
from rag.crawl_bounds import off_limits_address, same_site
from rag.sources import load_sitemap, load_source, load_urls
from tests.fakes.web_server import PAGE, serving


@asynccontextmanager
async def server(routes: dict[str, web.Response | tuple[int, str] | Callable[[str], web.Response]]):
    """A real server answering `routes` (path -> response, a function of the server's base URL giving
    one, an async handler of the request, or (status, Location) for a redirect); yields (base URL, the
    paths it was asked for)."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        asked.append(request.path)
        route = routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="not found")
        if isinstance(route, tuple):
            status, location = route
            return web.Response(status=status, headers={"Location": location.format(base=base)})
        if inspect.iscoroutinefunction(route):  # a handler of its own (a page that trickles, say)
            return await route(request)
        return route(base) if callable(route) else route

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serving(app) as base:
        yield base, asked


def html(title: str) -> web.Response:
    return web.Response(text=PAGE.format(title), content_type="text/html")


def sitemap(*urls: str) -> web.Response:
    locs = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return web.Response(text=f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>',
                        content_type="application/xml")


async def test_a_sitemap_cannot_send_the_crawler_to_another_site(caplog):
    async with server({"/latest/meta-data/keys": html("Internal keys")}) as (internal, internal_asked):
        routes = {
            "/sitemap.xml": lambda base: sitemap(f"{base}/faq", f"{internal}/latest/meta-data/keys"),
            "/faq": html("Billing FAQ"),
        }
        async with server(routes) as (site, asked), httpx.AsyncClient(timeout=5) as client:
            result = await load_sitemap(f"{site}/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == [f"{site}/faq"] and "/faq" in asked
    assert internal_asked == []  # another port of the same host is another site
    [skipped] = [r for r in caplog.records if r.getMessage() == "sitemap.other_sites_skipped"]
    assert skipped.skipped == 1 and skipped.sitemap == f"{site}/sitemap.xml"


async def test_a_page_may_redirect_within_its_site_but_not_elsewhere():
    async with server({"/admin": html("Internal admin password")}) as (internal, internal_asked):
        routes = {
            "/old-faq": (301, "{base}/faq"),
            "/faq": html("Billing FAQ"),
            "/promo": (302, internal + "/admin"),
            "/loop": (302, "{base}/loop"),
        }
        async with server(routes) as (site, asked), httpx.AsyncClient(timeout=5) as client:
            result = await load_urls([f"{site}/old-faq", f"{site}/promo", f"{site}/loop"], client=client)
    assert [d.doc_id for d in result.documents] == [f"{site}/old-faq"]
    assert "Billing FAQ" in result.documents[0].text and asked.count("/faq") == 1
    errors = dict(result.errors)
    # Shown after its URL, as "! <url>: redirects to …": the URL is not said twice.
    assert errors[f"{site}/promo"] == f"redirects to another site ({internal}/admin); not followed"
    assert "more than 5 redirects" in errors[f"{site}/loop"]
    assert internal_asked == []


async def test_an_oversized_page_is_refused_without_reading_it_all(monkeypatch):
    monkeypatch.setattr(rag.crawl, "MAX_PAGE_BYTES", 64 * 1024)
    big = web.Response(text=PAGE.format("x" * 200_000), content_type="text/html")
    async with server({"/big": big, "/small": html("Small")}) as (site, _), httpx.AsyncClient(timeout=5) as client:
        result = await load_urls([f"{site}/big", f"{site}/small"], client=client)
    assert [d.doc_id for d in result.documents] == [f"{site}/small"]
    assert dict(result.errors)[f"{site}/big"] == "is larger than 0.0625 MB; not read"  # after its URL, not again in it


async def test_a_gzip_bomb_sitemap_fails_its_source_instead_of_filling_memory(monkeypatch):
    monkeypatch.setattr(rag.sitemap, "MAX_SITEMAP_BYTES", 1024 * 1024)
    bomb = gzip.compress(b"<" + b" " * (8 * 1024 * 1024))  # 8 MB of markup from about 8 kB
    assert len(bomb) < 20_000
    routes = {"/sitemap.xml.gz": web.Response(body=bomb, content_type="application/octet-stream")}
    async with server(routes) as (site, _), httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(SourceError, match="larger than 1 MB uncompressed"):
            await load_sitemap(f"{site}/sitemap.xml.gz", client=client)


def _gzipped_zeros(size: int, *, times: int) -> bytes:
    """`size` zero bytes gzipped, then gzipped again `times - 1` times: 200 MB in well under a kilobyte twice over."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = b"".join(packer.compress(bytes(1 << 20)) for _ in range(size >> 20)) + packer.flush()
    for _ in range(times - 1):
        body = gzip.compress(body)
    return body


async def test_a_page_compressed_twice_is_refused_before_it_is_inflated():
    """`Content-Encoding: gzip, gzip`: httpx inflated each layer of a received piece whole before the size
    cap saw any of it, so 700 bytes became 400 MB in memory at once (a third layer: the whole server's
    memory, ingest running in the server's process). A page compressed once is still read."""
    bomb = _gzipped_zeros(200 << 20, times=2)
    assert len(bomb) < 2_000
    page = gzip.compress(PAGE.format("Compressed once").encode())
    routes = {"/bomb": web.Response(body=bomb, headers={"Content-Encoding": "gzip, gzip", "Content-Type": "text/html"}),
              "/page": web.Response(body=page, headers={"Content-Encoding": "gzip", "Content-Type": "text/html"})}
    async with server(routes) as (site, _), httpx.AsyncClient(timeout=5) as client:
        tracemalloc.start()
        try:
            result = await load_urls([f"{site}/bomb", f"{site}/page"], client=client)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 64 << 20, f"{peak >> 20} MB held"
    assert dict(result.errors)[f"{site}/bomb"] == "is compressed more than once (Content-Encoding: gzip, gzip); not read"
    assert [d.title for d in result.documents] == ["Compressed once"]


@pytest.mark.parametrize(("url", "other", "same"), [
    ("https://help.example/sitemap.xml", "https://help.example/a", True),
    ("https://help.example/sitemap.xml", "https://www.help.example/a", True),
    ("http://help.example/a", "https://help.example/a", True),  # the usual upgrade to https
    ("https://help.example/a", "https://help.example:8443/a", False),
    ("https://help.example/a", "http://help.example:443/a", False),
    ("https://help.example:8443/a", "https://help.example:8443/b", True),
    ("http://127.0.0.1:8330/a", "http://127.0.0.1:8331/a", False),
    ("https://help.example/a", "http://169.254.169.254/latest/meta-data/", False),
    ("https://help.example/a", "https://help.example.evil.test/a", False),
    ("https://help.example/a", "file:///etc/passwd", False),
])
def test_same_site_is_one_host_and_port_allowing_www_and_the_https_upgrade(url, other, same):
    assert same_site(url, other) is same


async def test_robots_txt_may_redirect_to_another_host(caplog):
    """RFC 9309 follows a robots.txt redirect across hosts (a CDN), and its body never reaches the knowledge
    base: its rules apply, while the pages themselves stay on the sitemap's site."""
    async with server({"/robots.txt": web.Response(text="User-agent: *\nDisallow: /private\n")}) as (cdn, _):
        routes = {
            "/robots.txt": (301, cdn + "/robots.txt"),
            "/sitemap.xml": lambda base: sitemap(f"{base}/faq", f"{base}/private"),
            "/faq": html("Billing FAQ"),
            "/private": html("Private"),
        }
        async with server(routes) as (site, asked), httpx.AsyncClient(timeout=5) as client:
            result = await load_sitemap(f"{site}/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == [f"{site}/faq"] and "/private" not in asked


@pytest.mark.parametrize("internal", ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:6379/",
                                      "http://[::1]/robots.txt", "http://10.0.0.5/robots.txt", "http://localhost/robots.txt",
                                      "http://2130706433/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/"])
async def test_a_public_sites_robots_txt_cannot_send_the_crawler_to_an_internal_address(internal):
    """A robots.txt redirect may leave its host, but a public site's may not reach this machine or its
    network: the GET alone reaches what listens there. A public site cannot be served on this machine,
    so its answers come from a transport that records every request."""
    asked: list[str] = []

    def public_site(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.path == "/robots.txt":
            return httpx.Response(301, headers={"Location": internal})
        return httpx.Response(200, text=sitemap("https://docs.example.com/faq").text, headers={"content-type": "application/xml"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(public_site), timeout=5) as client:
        with pytest.raises(SourceError, match="internal address"):
            await load_sitemap("https://docs.example.com/sitemap.xml", client=client)
    assert asked == ["https://docs.example.com/robots.txt"]


async def test_a_public_sites_robots_txt_may_still_redirect_to_another_public_host():
    def public(request: httpx.Request) -> httpx.Response:
        if request.url.host == "docs.example.com" and request.url.path == "/robots.txt":
            return httpx.Response(301, headers={"Location": "https://cdn.example.net/robots.txt"})
        if request.url.path == "/robots.txt":
            return httpx.Response(200, text="User-agent: *\nDisallow: /private\n")
        if request.url.path == "/sitemap.xml":
            return httpx.Response(200, text=sitemap("https://docs.example.com/faq", "https://docs.example.com/private").text,
                                  headers={"content-type": "application/xml"})
        return httpx.Response(200, text=PAGE.format("Billing FAQ"), headers={"content-type": "text/html"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(public), timeout=5) as client:
        result = await load_sitemap("https://docs.example.com/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == ["https://docs.example.com/faq"]


async def test_robots_txt_wildcards_and_redirects_are_honoured():
    robots = web.Response(text="User-agent: *\nDisallow: /*.pdf$\nDisallow: /priv*\nAllow: /private/press\n")
    routes = {
        "/robots.txt": robots,
        "/sitemap.xml": lambda base: sitemap(*(f"{base}{p}" for p in ("/faq", "/manual.pdf", "/private/salaries",
                                                                          "/private/press", "/go"))),
        "/faq": html("Billing FAQ"),
        "/manual.pdf": html("PDF manual"),
        "/private/salaries": html("Salaries"),
        "/private/press": html("Press kit"),
        "/go": (302, "{base}/private/salaries"),  # allowed itself, but it leads somewhere disallowed
    }
    async with server(routes) as (site, asked), httpx.AsyncClient(timeout=5) as client:
        result = await load_sitemap(f"{site}/sitemap.xml", client=client)
    assert sorted(d.doc_id for d in result.documents) == [f"{site}/faq", f"{site}/private/press"]
    assert "robots.txt disallows" in dict(result.errors)[f"{site}/go"]
    assert "/manual.pdf" not in asked and "/private/salaries" not in asked


async def test_a_sitemap_url_answering_with_a_web_page_fails_the_source_instead_of_listing_nothing():
    not_found = web.Response(text="<html><body><h1>Not found</h1><p>Try the search.</p></body></html>",
                             content_type="text/html")
    async with server({"/robots.txt": web.Response(text=""), "/sitemap.xml": not_found}) as (site, _), \
            httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(SourceError, match="not a sitemap: its root element is <html>"):
            await load_sitemap(f"{site}/sitemap.xml", client=client)


async def test_a_page_sending_a_byte_at_a_time_is_stopped_at_the_fetch_deadline(monkeypatch):
    # httpx's read timeout restarts with every byte; only a deadline on the whole fetch ends this.
    monkeypatch.setattr(rag.crawl, "FETCH_DEADLINE_S", 1.0)

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        await response.prepare(request)
        for _ in range(100):
            await response.write(b" ")
            await asyncio.sleep(0.1)
        return response

    async with server({"/trickle": trickle, "/faq": html("Billing FAQ")}) as (base, _), \
            httpx.AsyncClient(timeout=5) as client:
        started = asyncio.get_running_loop().time()
        result = await load_urls([f"{base}/trickle", f"{base}/faq"], client=client)
        took = asyncio.get_running_loop().time() - started
    assert [d.doc_id for d in result.documents] == [f"{base}/faq"]
    message = dict(result.errors)[f"{base}/trickle"]
    assert "not fully received within 1s" in message and base not in message  # the URL is the error's key, once
    assert took < 8  # not the 10 s or more the trickle takes (a margin for a loaded machine)


async def test_a_page_gone_for_good_is_left_out_and_a_missing_one_is_an_error():
    routes = {"/faq": html("Billing FAQ"), "/old": web.Response(status=410, text="gone")}
    async with server(routes) as (site, _), httpx.AsyncClient(timeout=5) as client:
        result = await load_urls([f"{site}/faq", f"{site}/old", f"{site}/typo"], client=client)
    assert [d.doc_id for d in result.documents] == [f"{site}/faq"]
    assert [u for u, _ in result.errors] == [f"{site}/typo"]  # 404: kept, with its error
    assert "For more information" not in result.errors[0][1]


async def test_robots_txt_crawl_delay_spaces_the_page_fetches_one_at_a_time(monkeypatch, caplog):
    starts: list[float] = []
    open_now = most_open = 0

    def page(title: str):
        async def handler(request: web.Request) -> web.Response:
            nonlocal open_now, most_open
            starts.append(asyncio.get_running_loop().time())
            open_now += 1
            most_open = max(most_open, open_now)
            await asyncio.sleep(0.05)
            open_now -= 1
            return html(title)
        return handler

    routes = {"/robots.txt": web.Response(text="User-agent: *\nCrawl-delay: 0.3\n"),
              "/sitemap.xml": lambda base: sitemap(*(f"{base}/p{i}" for i in range(4))),
              **{f"/p{i}": page(f"Page {i}") for i in range(4)}}
    async with server(routes) as (site, _), httpx.AsyncClient(timeout=5) as client:
        result = await load_sitemap(f"{site}/sitemap.xml", client=client)
    assert len(result.documents) == 4 and most_open == 1
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # Seen by the server, a gap also carries each request's own way there (a new connection, a busy
    # machine): 0.27 s was seen under load. Unpaced, the gaps are the 0.05 s handler or less.
    assert all(gap >= 0.2 for gap in gaps), gaps

    # A site asking for an hour between pages gets MAX_CRAWL_DELAY_S, and the log says so.
    monkeypatch.setattr(rag.crawl, "MAX_CRAWL_DELAY_S", 0.1)
    starts.clear()
    routes["/robots.txt"] = web.Response(text="User-agent: *\nCrawl-delay: 3600\n")
    async with server(routes) as (site, _), httpx.AsyncClient(timeout=5) as client:
        result = await asyncio.wait_for(load_sitemap(f"{site}/sitemap.xml", client=client), 10)
    assert len(result.documents) == 4
    [capped] = [r for r in caplog.records if r.getMessage() == "crawl.delay_capped"]
    assert (capped.crawl_delay, capped.cap) == (3600, 0.1)


async def test_a_public_name_that_resolves_to_this_machine_is_not_read(dns_answers):
    """DNS rebinding: the configured site's name answers with 127.0.0.1 (or 169.254.169.254), so its
    own same-site URLs reach a service on this machine; what that service says must not become
    knowledge customers read. A name may still resolve to a private network (an intranet wiki)."""
    async with server({"/faq": lambda _: html("Internal admin password")}) as (internal, asked):
        port = internal.rsplit(":", 1)[1]
        dns_answers["docs.example.com"] = "127.0.0.1"
        async with httpx.AsyncClient(timeout=5) as client:
            result = await load_urls([f"http://docs.example.com:{port}/faq"], client=client)
            assert result.documents == []
            [(url, error)] = result.errors
            assert url == f"http://docs.example.com:{port}/faq" and "127.0.0.1" in error and "not read" in error
            # Named by its address in the config, the same service is read: the operator chose it.
            named = await load_urls([f"{internal}/faq"], client=client)
    assert [d.title for d in named.documents] == ["Internal admin password"]
    off_limits = off_limits_address
    assert all(map(off_limits, ["169.254.169.254", "::1", "::ffff:127.0.0.1", "0.0.0.0", "fe80::1", "fd00:ec2::254",
                                "100.100.100.200"]))
    assert not any(map(off_limits, ["10.1.2.3", "192.168.0.7", "100.101.1.2", "93.184.216.34", "2606:4700::1"]))


async def test_a_public_name_that_resolves_to_this_machine_is_sent_no_request_at_all(dns_answers):
    """The answer of a service on this machine was kept out of the knowledge base, but the GET had already
    reached it, path and query included: a GET alone acts on many an internal endpoint (an admin port's
    /shutdown, a cache purge, a metadata service handing out a token). The ingest's client refuses the
    connection before it sends a byte; a private network's address is still read (an intranet wiki)."""
    async with server({"/admin/purge": lambda _: html("Purged"), "/faq": lambda _: html("Intranet FAQ")}) as (
            internal, asked):
        port = internal.rsplit(":", 1)[1]
        dns_answers["docs.example.com"] = "127.0.0.1"
        result = await load_source(SourceSettings(name="docs", type="urls",
                                                  urls=[f"http://docs.example.com:{port}/admin/purge?all=1"]))
        assert asked == []
        [(url, error)] = result.errors
        assert url == f"http://docs.example.com:{port}/admin/purge?all=1"
        assert "docs.example.com resolved to 127.0.0.1" in error and "not read" in error
        # Named by its address in the config, the same service is read: the operator chose it.
        named = await load_source(SourceSettings(name="docs", type="urls", urls=[f"{internal}/faq"]))
    assert [d.title for d in named.documents] == ["Intranet FAQ"] and asked == ["/faq"]


async def test_an_ingest_behind_the_environments_proxy_goes_through_it(monkeypatch):
    """`HTTP(S)_PROXY` in the environment: a network whose only way out is its proxy. The ingest's own client
    sends the pages through it, as httpx does for a client built without a transport of its own."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with server({"/faq": lambda _: html("Through the proxy")}) as (proxy, asked):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        result = await load_source(SourceSettings(name="docs", type="urls", urls=["http://docs.example.invalid/faq"]))
    assert result.errors == [] and [d.title for d in result.documents] == ["Through the proxy"]
    assert asked == ["/faq"]
