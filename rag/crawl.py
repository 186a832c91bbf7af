"""Fetching a site politely: robots.txt, sitemaps, and what a failed fetch says.

robots.txt is read as RFC 9309 says: a 4xx means no rules, a 5xx or no answer means disallow all
(then `SourceError`, so a passing outage fails the run and ingest keeps the pages it has). A
sitemap is XML, gzipped XML or plain text (one URL a line); an index is followed two levels deep,
and a child sitemap that fails is recorded while the others still list their pages.
"""

from __future__ import annotations

import gzip
import logging
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx
from lxml import etree

from gateway.errors import SourceError

log = logging.getLogger(__name__)

USER_AGENT = "bot-gateway-ingest/0.1"
MAX_SITEMAP_URLS = 5000


async def robots_rules(url: str, *, client: httpx.AsyncClient) -> RobotFileParser | None:
    """The site's robots.txt rules; None when it has none (any 4xx, RFC 9309 §2.3.1.3).

    A 5xx or no answer means disallow all (§2.3.1.4). That raises `SourceError` rather than returning
    an empty crawl, so that a passing outage fails the run and ingest keeps the pages it has.
    """
    parts = urlsplit(url)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    refusal = f"not crawling sitemap {url}: RFC 9309 reads this as disallow all"
    try:
        response = await client.get(robots_url, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise SourceError(f"robots.txt {robots_url} could not be fetched ({describe_fetch_error(exc, client.timeout)}); {refusal}") from None
    if response.status_code >= 500:
        raise SourceError(f"robots.txt {robots_url} answered {response.status_code}; {refusal}")
    if response.status_code >= 400:
        return None
    parser = RobotFileParser(robots_url)
    parser.parse(response.text.splitlines())
    return parser


async def sitemap_urls(url: str, *, client: httpx.AsyncClient, depth: int, errors: list[tuple[str, str]]) -> list[str]:
    """Page URLs of a sitemap, following an index. The top sitemap failing raises `SourceError`; a
    child that fails lands in `errors` so the healthy children's pages still load."""
    is_index, locs = await _fetch_sitemap(url, client=client)
    if not is_index:
        if len(locs) > MAX_SITEMAP_URLS:
            log.warning("sitemap %s lists %d pages; only the first %d are ingested", url, len(locs), MAX_SITEMAP_URLS,
                        extra={"sitemap": url, "pages": len(locs), "cap": MAX_SITEMAP_URLS})
        return locs[:MAX_SITEMAP_URLS]
    if depth >= 2:
        log.warning("sitemap index %s is nested more than two deep; its sitemaps are not read", url,
                    extra={"sitemap": url})
        return []
    pages: list[str] = []
    for child in locs:
        try:
            pages.extend(await sitemap_urls(child, client=client, depth=depth + 1, errors=errors))
        except SourceError as exc:
            log.warning("child sitemap failed: %s: %s", child, exc, extra={"sitemap": child, "error": str(exc)})
            errors.append((child, str(exc)))
        if len(pages) >= MAX_SITEMAP_URLS:
            log.warning("sitemap index %s reached %d pages; the rest are not ingested", url, MAX_SITEMAP_URLS,
                        extra={"sitemap": url, "cap": MAX_SITEMAP_URLS})
            break
    return pages[:MAX_SITEMAP_URLS]


async def _fetch_sitemap(url: str, *, client: httpx.AsyncClient) -> tuple[bool, list[str]]:
    """(is a sitemap index, the URLs it lists) of one sitemap file."""
    try:
        response = await client.get(url, follow_redirects=True)
        response.raise_for_status()
        body = response.content
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
    except (httpx.HTTPError, httpx.InvalidURL, OSError, EOFError) as exc:  # OSError, EOFError: bad gzip
        raise SourceError(f"sitemap {url} could not be fetched: {describe_fetch_error(exc, client.timeout)}") from None
    if not body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return False, _text_sitemap(url, body)
    try:
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
        root = etree.fromstring(body, parser=parser)
    except etree.XMLSyntaxError as exc:
        raise SourceError(f"sitemap {url} is not valid XML: {exc}") from None
    locs = [urljoin(url, (el.text or "").strip()) for el in root.iter("{*}loc") if (el.text or "").strip()]
    return etree.QName(root).localname == "sitemapindex", locs


def _text_sitemap(url: str, body: bytes) -> list[str]:
    """The URLs of a plain-text sitemap: one absolute http(s) URL a line (sitemaps.org)."""
    lines = [line.strip() for line in body.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()]
    urls = [line for line in lines if line]
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
        raise SourceError(f"sitemap {url} is neither XML nor a plain-text list of URLs")
    return urls


def describe_fetch_error(exc: BaseException, timeout: httpx.Timeout | None = None) -> str:
    """`Type: message` of an error. A timeout names the limit it hit: httpx's own message is often empty."""
    name = type(exc).__name__
    limit = _timeout_limit(exc, timeout)
    if limit is not None:
        return f"{name} after {limit:g}s"
    return f"{name}: {exc}" if str(exc) else name


def _timeout_limit(exc: BaseException, timeout: httpx.Timeout | None) -> float | None:
    if timeout is None or not isinstance(exc, httpx.TimeoutException):
        return None
    limits = {httpx.ConnectTimeout: timeout.connect, httpx.ReadTimeout: timeout.read,
              httpx.WriteTimeout: timeout.write, httpx.PoolTimeout: timeout.pool}
    return next((value for kind, value in limits.items() if isinstance(exc, kind)), None)
