"""A site that says it is overwhelmed (429 Too Many Requests): the crawl waits what it asks, tries the page
again and keeps that pace. Each page was that page's error while the crawl went on at full speed."""

from __future__ import annotations

import asyncio
import logging

import httpx
from aiohttp import web

from rag.crawl import Pace
from rag.sources import load_urls
from tests.fakes.web_server import PAGE, serving


async def test_a_429_slows_the_crawl_to_the_pace_the_site_asks_and_the_page_is_fetched_again(caplog):
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[str, float]] = []

    async def page(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        arrivals.append((name, loop.time()))
        if name == "a" and sum(1 for n, _ in arrivals if n == "a") == 1:
            return web.Response(status=429, headers={"Retry-After": "0.3"}, text="slow down")
        if name in "bcd":
            await asyncio.sleep(0.2)  # asked beside a: still busy when its 429 comes back
        return web.Response(text=PAGE.format(name), content_type="text/html")

    await _crawl_six_pages(page)
    assert [n for n, _ in arrivals].count("a") == 2
    [said] = [r for r in caplog.records if r.getMessage() == "crawl.slowed_down"]
    assert (said.status, said.every_s) == (429, 0.3)
    # b, c and d were asked beside a (4 at a time); a again, e and f come after the 429, 0.3 s apart.
    paced = sorted(t for n, t in arrivals if n in "aef")
    # 0.3 s apart as they leave; a loaded machine delivers one sooner than another, so the bar is lower.
    assert len(paced) == 4 and all(later - earlier >= 0.15 for earlier, later in zip(paced, paced[1:])), paced


def test_retry_after_may_be_a_date_and_is_capped():
    ok = httpx.Response(200, request=httpx.Request("GET", "https://help.example/a"))
    unavailable = httpx.Response(503, request=httpx.Request("GET", "https://help.example/a"))
    assert not Pace(None).slowed_down_by(ok) and not Pace(None).slowed_down_by(unavailable)  # a 503 that asks nothing
    logging.getLogger("rag.crawl").disabled = True
    try:
        asked = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
                               request=httpx.Request("GET", "https://help.example/a"))
        pace = asyncio.run(_slowed(asked))
        assert pace.delay == 0.0  # a date in the past: no wait, but the page is tried again
        hour = httpx.Response(429, headers={"Retry-After": "3600"}, request=httpx.Request("GET", "https://help.example/a"))
        assert asyncio.run(_slowed(hour)).delay == 30.0  # rag.crawl.MAX_CRAWL_DELAY_S
    finally:
        logging.getLogger("rag.crawl").disabled = False


async def _slowed(response: httpx.Response) -> Pace:
    pace = Pace(None)
    assert pace.slowed_down_by(response)
    return pace


async def test_after_a_429_no_two_fetches_overlap_not_even_those_already_in_flight():
    """Spacing only the starts let 4 fetches (the unpaced concurrency) overlap after a 429 whenever a page took
    longer than the pace, and the ones in flight when it came went on beside the next."""
    loop = asyncio.get_running_loop()
    visits: list[tuple[str, float, float]] = []  # (page, asked at, answered at)
    limited_at: list[float] = []  # when a was answered 429

    async def page(request: web.Request) -> web.Response:
        name, asked = request.match_info["name"], loop.time()
        if name == "a" and not limited_at:
            limited_at.append(asked)
            return web.Response(status=429, headers={"Retry-After": "0.05"}, text="slow down")
        await asyncio.sleep(0.25)  # each page takes far longer than the pace the site asks for
        visits.append((name, asked, loop.time()))
        return web.Response(text=PAGE.format(name), content_type="text/html")

    await _crawl_six_pages(page)
    # b, c and d were asked beside a; everything asked after the 429 waits for them, then goes one at a time.
    after = sorted((asked, answered) for name, asked, answered in visits if name in "aef")
    before = [answered for name, asked, answered in visits if name in "bcd"]
    assert len(after) == 3 and max(asked for name, asked, _ in visits if name in "bcd") < after[0][0]
    assert after[0][0] >= max(before) - 0.02, (after, before)
    assert all(later[0] >= earlier[1] - 0.02 for earlier, later in zip(after, after[1:])), after


async def _crawl_six_pages(page) -> None:
    """A `urls` source of pages a to f on a site whose `/p/{name}` answers with `page`; every page read."""
    app = web.Application()
    app.router.add_get("/p/{name}", page)
    async with serving(app) as base, httpx.AsyncClient(timeout=5) as client:
        result = await load_urls([f"{base}/p/{name}" for name in "abcdef"], client=client)
    assert sorted(d.title for d in result.documents) == list("abcdef") and not result.errors
