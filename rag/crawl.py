"""Fetching a site politely and safely: robots.txt, sitemaps, bounded reads, what a failed fetch says.

robots.txt is read as RFC 9309 says: a 4xx means no rules, a 5xx or no answer means disallow all
(then `SourceError`, so a passing outage fails the run and ingest keeps the pages it has). Its
`Crawl-delay` (or `Request-rate`) is kept too: pages are then fetched one at a time, that far apart.
Sitemaps are read by `rag.sitemap`.

The configured URL may point anywhere; what the fetched content points to may not leave its site.
A sitemap lists only its own site's pages (sitemaps.org), and a redirect is followed only within the
site of the URL asked for. Otherwise whoever edits a listed page or the sitemap could make the
gateway fetch an internal address (a cloud metadata service, an admin port) and put the answer in
the knowledge base that customers read. robots.txt may redirect to another host (RFC 9309: a CDN),
but not from a public site to a loopback, private or link-local address: its body never reaches the
knowledge base, yet the GET alone reaches whatever listens there. Bodies are read up to a cap, gzip included,
and one compressed more than once (`Content-Encoding: gzip, gzip`) is not read at all.

A site's owner controls its DNS too: a name that answers with 127.0.0.1 or 169.254.169.254 (at once, or
after a first honest answer: rebinding) makes the same-site URLs reach this machine or the cloud's
metadata service. So the address each fetch actually connected to is checked before its request is sent
(`crawl_client`, the ingest's) and again before its answer is read (`off_limits_address`), unless the configured URL names such an address itself. A private network's
addresses stay allowed: an intranet wiki is configured by its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import httpx
from protego import Protego

from gateway.capped_body import BodyTooLarge, read_capped
from gateway.errors import GatewayError, SourceError
from rag.crawl_bounds import check_peer, internal_host, same_site

log = logging.getLogger(__name__)

USER_AGENT = "bot-gateway-ingest/0.1"
MAX_PAGE_BYTES = 20 * 1024 * 1024
MAX_ROBOTS_BYTES = 512 * 1024  # RFC 9309 §2.5: at least 500 KiB is parsed
MAX_REDIRECTS = 5
FETCH_DEADLINE_S = 60.0
"""The whole of one fetch, redirects and body included. httpx's read timeout restarts with every byte,
so a server sending one byte a second held a run (and every other source's, which wait their turn)
for as long as it liked."""
MAX_CRAWL_DELAY_S = 30.0
"""The longest pause between two fetches that a robots.txt `Crawl-delay` gets: a site asking for an
hour would keep its source's run going for months."""
RATE_LIMITED_WAIT_S = 10.0
"""How long a crawl pauses after a `429 Too Many Requests` that does not say (`Retry-After`)."""
async def fetch(
    url: str, *, client: httpx.AsyncClient, headers: dict[str, str] | None = None, max_bytes: int | None = None,
    any_site: bool = False, allowed: Callable[[str], bool] | None = None, deadline: float | None = None,
) -> httpx.Response:
    """GET `url` with its body read (at most `max_bytes`, default `MAX_PAGE_BYTES`, else `SourceError`),
    following redirects only within its site (`same_site`; `any_site` for robots.txt, whose body never
    reaches the knowledge base and which RFC 9309 redirects across hosts); a redirect elsewhere, or to a
    URL `allowed` refuses (robots.txt), raises `SourceError`, and so does a fetch that has not finished
    within `deadline` seconds (`FETCH_DEADLINE_S`). The response's `url` is where the body came from."""
    deadline = FETCH_DEADLINE_S if deadline is None else deadline
    try:
        async with asyncio.timeout(deadline):
            return await _fetch(url, client=client, headers=headers, any_site=any_site, allowed=allowed,
                                max_bytes=MAX_PAGE_BYTES if max_bytes is None else max_bytes)
    except TimeoutError:
        raise SourceError(f"{url}: not fully received within {deadline:g}s; not read") from None


async def _fetch(url: str, *, client: httpx.AsyncClient, headers: dict[str, str] | None, max_bytes: int,
                 any_site: bool, allowed: Callable[[str], bool] | None) -> httpx.Response:
    target = url
    for _ in range(MAX_REDIRECTS + 1):
        request = client.build_request("GET", target, headers=headers)
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            check_peer(url, response)  # before a redirect is followed or a byte of the body read
            if response.next_request is not None:  # a redirect, which the client did not follow
                location = str(response.next_request.url)
                if not any_site and not same_site(url, location):
                    raise SourceError(f"{target} redirects to another site ({location}); not followed")
                if any_site and internal_host(location) and not internal_host(url) and not same_site(url, location):
                    raise SourceError(f"{target} redirects to an internal address ({location}); not followed")
                if allowed is not None and not allowed(location):
                    raise SourceError(f"{target} redirects to {location}, which robots.txt disallows; not followed")
                target = location
                continue
            body = await _read_capped(response, max_bytes, what=target)
        finally:
            await response.aclose()
        # Built again with the body as read (already decoded: so without its encoding and length).
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding", "content-length")]
        return httpx.Response(response.status_code, headers=kept, content=body, request=response.request)
    raise SourceError(f"{url}: more than {MAX_REDIRECTS} redirects")


async def _read_capped(response: httpx.Response, max_bytes: int, *, what: str) -> bytes:
    try:
        return await read_capped(response, max_bytes)
    except BodyTooLarge as exc:
        raise SourceError(f"{what} {exc}; not read") from None


class Pace:
    """When a crawl's next fetch may start: `delay` seconds after the last one (a robots.txt
    `Crawl-delay`), and slower once the site says it is overwhelmed. A `429 Too Many Requests` (or a
    503 with `Retry-After`) was each page's error while the crawl went on at full speed, so a site that
    rate-limits got every page of the run refused; now the crawl waits what the site asks (at most
    `MAX_CRAWL_DELAY_S`), tries that page again, and keeps that pace for the rest of the run.

    A paced crawl fetches one page at a time (`turn` is held for the whole fetch). Why: spacing only the
    starts let up to 4 fetches (the unpaced concurrency) still overlap after a 429 whenever a page took
    longer than the delay; and the fetches already in flight when it came are waited for before the next."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay
        self._next_start = 0.0
        self._turns = asyncio.Lock()
        self._in_flight = 0
        self._idle = asyncio.Condition()
        self._said = False

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Hold this while fetching: paced, it waits for every other fetch and for its start time."""
        if not self.delay:
            async with self._fetching():
                yield
            return
        # One at a time: waiters each get a turn of their own, `delay` after the last one started.
        async with self._turns:
            async with self._idle:  # fetches started before the crawl was slowed end first
                await self._idle.wait_for(lambda: self._in_flight == 0)
            loop = asyncio.get_running_loop()
            while (wait := self._next_start - loop.time()) > 0:  # again after waking: a 429 may have pushed it
                await asyncio.sleep(wait)
            self._next_start = loop.time() + (self.delay or 0.0)
            async with self._fetching():
                yield

    @contextlib.asynccontextmanager
    async def _fetching(self) -> AsyncIterator[None]:
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            async with self._idle:
                self._idle.notify_all()

    def slowed_down_by(self, response: httpx.Response) -> bool:
        """True, and slower from now on, when `response` asks the crawler to slow down."""
        asked = response.headers.get("retry-after")
        if response.status_code != 429 and not (response.status_code == 503 and asked):
            return False
        wait = min(_seconds(asked) if asked else RATE_LIMITED_WAIT_S, MAX_CRAWL_DELAY_S)
        self.delay = max(self.delay or 0.0, wait)
        self._next_start = max(self._next_start, asyncio.get_running_loop().time() + wait)
        if not self._said:
            self._said = True
            log.warning("crawl.slowed_down", extra={"site": urlsplit(str(response.url)).netloc,
                                                    "status": response.status_code, "every_s": self.delay,
                                                    "url": str(response.url), "retry_after": asked})
        return True


def _seconds(retry_after: str) -> float:
    """A `Retry-After` value (seconds, or an HTTP date) as seconds from now; `RATE_LIMITED_WAIT_S` when unreadable."""
    try:
        return max(0.0, float(retry_after))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(retry_after) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return RATE_LIMITED_WAIT_S


@dataclass(frozen=True)
class RobotsRules:
    """A site's robots.txt as RFC 9309 reads it (protego: `*` and `$` patterns, the longest match wins,
    an `Allow` wins a tie); `urllib.robotparser` matched plain prefixes, first rule first, so
    `Disallow: /*.pdf$` let every PDF through."""

    parser: Protego

    def allows(self, url: str) -> bool:
        return self.parser.can_fetch(url, USER_AGENT)

    def delay(self) -> float | None:
        """Seconds to leave between two fetches: `Crawl-delay`, or `Request-rate` (n pages per m seconds)
        read as m/n; at most `MAX_CRAWL_DELAY_S`. None when the site asks for neither."""
        delay = self.parser.crawl_delay(USER_AGENT)
        rate = self.parser.request_rate(USER_AGENT)
        if rate is not None and rate.requests > 0:
            delay = max(delay or 0.0, rate.seconds / rate.requests)
        if not delay or delay <= 0:
            return None
        if delay > MAX_CRAWL_DELAY_S:
            log.warning("crawl.delay_capped",
                        extra={"crawl_delay": delay, "cap": MAX_CRAWL_DELAY_S})
        return min(float(delay), MAX_CRAWL_DELAY_S)


async def robots_rules(url: str, *, client: httpx.AsyncClient) -> RobotsRules | None:
    """The site's robots.txt rules; None when it has none (any 4xx, RFC 9309 §2.3.1.3).

    A 5xx or no answer means disallow all (§2.3.1.4). That raises `SourceError` rather than returning
    an empty crawl, so that a passing outage fails the run and ingest keeps the pages it has.
    """
    parts = urlsplit(url)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    refusal = f"not crawling sitemap {url}: RFC 9309 reads this as disallow all"
    try:
        response = await fetch(robots_url, client=client, max_bytes=MAX_ROBOTS_BYTES, any_site=True)
    except SourceError as exc:  # too large, or sent elsewhere: no rules we can read, so none we can honour
        raise SourceError(f"{exc}; {refusal}") from None
    except httpx.HTTPError as exc:  # most often the whole site is down, not a robots.txt saying no
        raise SourceError(f"{parts.netloc} did not answer for {robots_url} ({describe_fetch_error(exc, client.timeout)}); "
                          f"not crawling sitemap {url} until it does (RFC 9309: an unreachable robots.txt "
                          "means disallow all)") from None
    if response.status_code >= 500:
        raise SourceError(f"robots.txt {robots_url} answered {response.status_code}; {refusal}")
    if response.status_code >= 400:
        return None
    return RobotsRules(Protego.parse(response.text))


def describe_fetch_error(exc: BaseException, timeout: httpx.Timeout | None = None) -> str:
    """`Type: message` of an error (the message alone for our own). A timeout names the limit it hit: httpx's own message is often empty."""
    name = type(exc).__name__
    if isinstance(exc, httpx.HTTPStatusError):
        # httpx's own text named the URL again ("! <url>: HTTPStatusError: Client error '404 Not Found' for
        # url '<url>'"), three times over for a child sitemap; the status is what the reader needs.
        return f"answered {exc.response.status_code} {exc.response.reason_phrase}".rstrip()
    limit = _timeout_limit(exc, timeout)
    if limit is not None:
        return f"{name} after {limit:g}s"
    # The first line only: httpx adds "For more information check: <a web page>" to every status error.
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, GatewayError) and message:
        return message  # ours, written to be read as it is
    return f"{name}: {message}" if message else name


def _timeout_limit(exc: BaseException, timeout: httpx.Timeout | None) -> float | None:
    if timeout is None or not isinstance(exc, httpx.TimeoutException):
        return None
    limits = {httpx.ConnectTimeout: timeout.connect, httpx.ReadTimeout: timeout.read,
              httpx.WriteTimeout: timeout.write, httpx.PoolTimeout: timeout.pool}
    return next((value for kind, value in limits.items() if isinstance(exc, kind)), None)
