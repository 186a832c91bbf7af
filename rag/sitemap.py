"""Reading a sitemap: the pages it lists, following an index.

A sitemap is XML, gzipped XML or plain text (one URL a line); an index is followed two levels deep,
and a child sitemap that fails is recorded while the others still list their pages. A sitemap lists
only its own site's pages (sitemaps.org): other sites' URLs are skipped (`rag.crawl`, on why). Each
page comes with its `<lastmod>` when the sitemap gives one that can be relied on (`_reliable`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import zlib
from datetime import datetime, time, timedelta, timezone
from urllib.parse import urljoin

import httpx
from lxml import etree

from gateway.capped_body import megabytes
from gateway.errors import IN_RUN_ERRORS, SourceError
from rag.crawl import describe_fetch_error, fetch
from rag.crawl_bounds import same_site

log = logging.getLogger(__name__)

MAX_SITEMAP_URLS = 5000
MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # sitemaps.org's limit, uncompressed


Listing = dict[str, str | None]
"""Page URL -> its `<lastmod>`, or None when it has none that can be relied on (`_reliable`)."""


async def sitemap_urls(url: str, *, client: httpx.AsyncClient, depth: int, errors: list[tuple[str, str]],
                       read: set[str] | None = None) -> Listing:
    """Page URLs of a sitemap, with their `<lastmod>`, following an index. The top sitemap failing raises
    `SourceError`; a child that fails lands in `errors` so the healthy children's pages still load. Each sitemap
    file is read once (`read`): an index that lists itself, or two that list one child, gave each failure twice."""
    read = set() if read is None else read
    read.add(url)
    is_index, listed = await _fetch_sitemap(url, client=client)
    locs = [(loc, lastmod) for loc, lastmod in listed if same_site(url, loc)]
    if len(locs) < len(listed):
        log.warning("sitemap.other_sites_skipped",
                    extra={"sitemap": url, "skipped": len(listed) - len(locs),
                           "example": next(loc for loc, _ in listed if not same_site(url, loc))})
    if not is_index:
        if len(locs) > MAX_SITEMAP_URLS:
            log.warning("sitemap.capped",
                        extra={"sitemap": url, "pages": len(locs), "cap": MAX_SITEMAP_URLS})
        pages: Listing = {}
        for loc, lastmod in locs[:MAX_SITEMAP_URLS]:
            pages.setdefault(loc, lastmod)  # a page listed twice: its first entry
        return pages
    if depth >= 2:
        log.warning("sitemap.nested_too_deep", extra={"sitemap": url})
        return {}
    pages = {}
    for child, _ in locs:
        if child in read:
            continue
        try:
            for page, lastmod in (await sitemap_urls(child, client=client, depth=depth + 1, errors=errors,
                                                     read=read)).items():
                pages.setdefault(page, lastmod)
        except SourceError as exc:
            error = str(exc).replace(f"sitemap {child} ", "sitemap ", 1)  # recorded after the child's URL: once is enough
            log.warning("sitemap.child_failed", extra={"sitemap": child, "error": error, IN_RUN_ERRORS: True})
            errors.append((child, error))
        if len(pages) >= MAX_SITEMAP_URLS:
            log.warning("sitemap.index_capped",
                        extra={"sitemap": url, "cap": MAX_SITEMAP_URLS})
            break
    return dict(list(pages.items())[:MAX_SITEMAP_URLS])


async def _fetch_sitemap(url: str, *, client: httpx.AsyncClient) -> tuple[bool, list[tuple[str, str | None]]]:
    """(is a sitemap index, the URLs it lists with their `<lastmod>`) of one sitemap file."""
    try:
        response = await fetch(url, client=client, max_bytes=MAX_SITEMAP_BYTES)
        response.raise_for_status()
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise SourceError(f"sitemap {url} could not be fetched: {describe_fetch_error(exc, client.timeout)}") from None
    except SourceError as exc:
        raise SourceError(f"sitemap {url} could not be fetched: {exc}") from None
    # In a thread, as pages and PDFs are parsed: a 50 MB sitemap (50,000 URLs) takes seconds to inflate
    # and parse, and on the event loop the server's web chat and health checks waited for it.
    return await asyncio.to_thread(_parse_sitemap, url, response.content)


def _parse_sitemap(url: str, body: bytes) -> tuple[bool, list[tuple[str, str | None]]]:
    """(is a sitemap index, the URLs it lists with their `<lastmod>`) of a sitemap file's body: XML, gzipped
    or plain text (which has none)."""
    if body[:2] == b"\x1f\x8b":
        body = _gunzip(body, what=url)
    if not body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return False, [(page, None) for page in _text_sitemap(url, body)]
    # Blank lines before `<?xml` (a WordPress plugin's or theme's stray output) made lxml refuse the whole
    # sitemap ("XML declaration allowed only at the start"), and with it the source.
    body = body.lstrip(b"\xef\xbb\xbf \t\r\n")
    try:
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
        root = etree.fromstring(body, parser=parser)
    except etree.XMLSyntaxError as exc:
        raise SourceError(f"sitemap {url} is not valid XML: {exc}") from None
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        # An error page served with 200 (a CMS's "Not found") listed no pages, and the run then
        # deleted every page of the source as gone.
        raise SourceError(f"sitemap {url} is not a sitemap: its root element is <{kind}>, not <urlset> or <sitemapindex>")
    entries = []
    for el in root.iter("{*}loc"):
        if loc := (el.text or "").strip():
            parent = el.getparent()
            lastmod = (parent.findtext("{*}lastmod") or "").strip() if parent is not None else ""
            entries.append((urljoin(url, loc), lastmod or None))
    return kind == "sitemapindex", _reliable(url, entries)


def _reliable(url: str, entries: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The entries with only the `<lastmod>`s that an unchanged value can be trusted on: `rag.sources` does
    not fetch a page whose `<lastmod>` is the one it had when it was last read. Left out (None: the page is
    fetched, and its content hash decides): one not in W3C form, one whose day or moment is not over yet
    (a page changed again later today would keep today's date), and every one of a sitemap that gives all
    its pages one `<lastmod>` (a generator stamping its build time, which may also never change)."""
    now = datetime.now(timezone.utc)
    kept = [(loc, lastmod if lastmod and _settled(lastmod, now) else None) for loc, lastmod in entries]
    given = {lastmod for _, lastmod in kept}
    if len(kept) > 1 and len(given) == 1 and None not in given:
        log.info("sitemap.lastmod_ignored", extra={"sitemap": url, "pages": len(kept), "lastmod": given.pop(),
                                                   "why": "every page has the same <lastmod>"})
        return [(loc, None) for loc, _ in kept]
    return kept


_W3C = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?")
"""The W3C forms a `<lastmod>` names a day or a moment in (a year or a month alone are too coarse to use)."""


def _settled(lastmod: str, now: datetime) -> bool:
    """Whether the whole day or moment a `<lastmod>` names (W3C: a date, or a date and time with its zone) is
    over, in every time zone; at most 64 characters, as stored. A moment is as long as its precision: a page
    read at 10:00:20 whose `<lastmod>` says 10:00 may change again at 10:00:40 and still say 10:00. Other ISO
    forms (`2026-W49`, `…T10`), which `datetime.fromisoformat` reads as their first day or hour, are not used."""
    match = _W3C.fullmatch(lastmod) if len(lastmod) <= 64 else None
    try:
        when = datetime.fromisoformat(lastmod) if match else None
    except ValueError:
        when = None
    if when is None:
        return False
    if not match.group(1):  # a whole day, in the site's zone (UTC-12 to UTC+14)
        return datetime.combine(when.date(), time(), timezone.utc) + timedelta(days=1, hours=12) <= now
    end = when + timedelta(seconds=1 if match.group(2) else 60)  # the end of its second, or of its minute
    if end.tzinfo is None:  # W3C asks for a zone; without one, the latest it may be
        return end.replace(tzinfo=timezone.utc) + timedelta(hours=12) <= now
    return end <= now


def _text_sitemap(url: str, body: bytes) -> list[str]:
    """The URLs of a plain-text sitemap: one absolute http(s) URL a line (sitemaps.org)."""
    lines = [line.strip() for line in body.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()]
    urls = [line for line in lines if line]
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
        raise SourceError(f"sitemap {url} is neither XML nor a plain-text list of URLs")
    return urls


def _gunzip(body: bytes, *, what: str) -> bytes:
    """A gzipped sitemap, inflated up to `MAX_SITEMAP_BYTES` (a small file can inflate to gigabytes)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, MAX_SITEMAP_BYTES + 1)
    except zlib.error as exc:
        raise SourceError(f"sitemap {what} is not valid gzip: {exc}") from None
    if len(out) > MAX_SITEMAP_BYTES:
        raise SourceError(f"sitemap {what} is larger than {megabytes(MAX_SITEMAP_BYTES)} uncompressed; not read")
    return out
