"""Knowledge sources: a directory, a list of URLs, or a sitemap, loaded into `Document`s.

HTML is reduced to its main text by trafilatura, written as Markdown so that the chunker still
sees headings, lists, code and tables. PDF text comes from pypdf, with headings and paragraphs
recovered from font sizes and line gaps (`rag.pdf`), also as Markdown. A source that cannot be read at
all raises `SourceError`; a single page, file or child sitemap that fails (HTTP error, malformed
URL, broken PDF, binary content) is recorded in `LoadResult.errors` with its URL or path and the
rest still load (ingest then keeps that document's previous chunks). Text is decoded by
`rag.decoding`: BOM, declared charset, UTF-8, then a legacy charset.

Sitemaps (XML, gzipped XML or plain text, one URL a line) honour robots.txt (user agent
`USER_AGENT`) as RFC 9309 says: a 4xx robots.txt means no rules, a 5xx or no answer means
disallow all. An explicit `urls` list is the owner's own choice of pages, so it is fetched as given.

Pages are fetched conditionally when the last fetch left validators (`ETag`, `Last-Modified`): a
`304 Not Modified` lands in `LoadResult.not_modified` and ingest keeps that page's chunks, so a
scheduled run over an unchanged site downloads almost nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx
from lxml import etree

from gateway.errors import GatewayError
from gateway.settings import SourceSettings
from rag.blocks import first_heading, split_front_matter
from rag.decoding import decode_text

log = logging.getLogger(__name__)

USER_AGENT = "bot-gateway-ingest/0.1"
TIMEOUT = httpx.Timeout(15.0, connect=5.0)
MAX_SITEMAP_URLS = 5000
MAX_CONCURRENCY = 4
Format = Literal["markdown", "text", "html", "pdf"]
_SUFFIXES: dict[str, Format] = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".html": "html", ".htm": "html", ".pdf": "pdf"}


class SourceError(GatewayError):
    """A whole source could not be loaded (missing folder, unreachable sitemap)."""


@dataclass(frozen=True)
class Document:
    """One loaded document. `text` is Markdown for markdown/html/pdf, plain text for text."""

    doc_id: str
    title: str
    url: str | None
    text: str
    format: Format
    etag: str | None = None  # HTTP validators of a fetched page, for the next conditional fetch
    last_modified: str | None = None


Validators = dict[str, tuple[str | None, str | None]]
"""URL -> (ETag, Last-Modified) from the page's last fetch."""


@dataclass
class LoadResult:
    """What a source yielded: documents, (doc_id, message) for each item that failed, and the pages
    the server said are unchanged since the validators given (304)."""

    documents: list[Document] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    not_modified: list[str] = field(default_factory=list)
    # A child sitemap failed: pages missing from this listing may still exist, so none is deleted.
    listing_incomplete: bool = False


async def load_source(
    source: SourceSettings, *, client: httpx.AsyncClient | None = None, base_dir: Path | None = None,
    validators: Validators | None = None,
) -> LoadResult:
    """Load any configured source. Relative directory paths resolve against `base_dir`; pages with
    `validators` are fetched conditionally."""
    if source.type == "directory":
        path = Path(source.path or "")
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return await load_directory(path)
    async with _client(client) as http:
        if source.type == "urls":
            return await load_urls(source.urls, client=http, validators=validators)
        return await load_sitemap(source.url or source.urls[0], client=http, validators=validators)


async def load_directory(path: Path) -> LoadResult:
    """Every .md/.txt/.html/.htm/.pdf file under `path`, recursively, with relative-path ids.

    Hidden files and folders (`.git/`, `.obsidian/`, `.~draft.md`) are skipped: they are tool state and
    editor leftovers, not knowledge, and a `.git/` folder can hold old copies of every page.
    """
    if not path.is_dir():
        raise SourceError(f"knowledge directory not found: {path}")
    result = LoadResult()
    for file in _files_under(path):
        doc_id = file.relative_to(path).as_posix()
        if not (file.is_file() and file.suffix.lower() in _SUFFIXES) or _is_hidden(doc_id):
            continue
        try:
            doc = await asyncio.to_thread(_read_file, file, doc_id)
        except Exception as exc:  # one unreadable file must not stop the others
            message = _describe(exc)
            log.warning("source file failed: %s: %s", doc_id, message, extra={"doc_id": doc_id, "error": message})
            result.errors.append((doc_id, message))
            continue
        if doc.text.strip():
            result.documents.append(doc)
    return result


def _files_under(root: Path) -> list[Path]:
    """Every file under `root`, sorted, following symlinked folders too (`rglob` skips them, while it
    follows symlinked files), each real folder once, so a link back up cannot loop."""
    seen: set[str] = set()
    files: list[Path] = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        files.extend(Path(folder) / name for name in names)
    return sorted(files)


def _is_hidden(relative_path: str) -> bool:
    return any(part.startswith(".") for part in relative_path.split("/"))


async def load_urls(urls: list[str], *, client: httpx.AsyncClient, validators: Validators | None = None) -> LoadResult:
    """Fetch each page (a few at a time); a failing URL is recorded and the others continue."""
    result = LoadResult()
    gate = asyncio.Semaphore(MAX_CONCURRENCY)
    validators = validators or {}

    async def one(url: str) -> Document | tuple[str, str] | str:  # a page, (url, error), or a 304's url
        async with gate:
            try:
                conditional = _conditional_headers(validators.get(url))
                response = await client.get(url, follow_redirects=True, headers=conditional)
                if response.status_code == 304 and conditional:
                    return url  # unchanged since its validators: ingest keeps its chunks
                response.raise_for_status()
                return replace(_from_response(url, response), etag=response.headers.get("etag"),
                               last_modified=response.headers.get("last-modified"))
            except Exception as exc:  # HTTP error, malformed URL, broken PDF, binary body: this page only
                message = _describe(exc, client.timeout)
                log.warning("source url failed: %s: %s", url, message, extra={"url": url, "error": message})
                return (url, message)

    for outcome in await asyncio.gather(*(one(u) for u in dict.fromkeys(urls))):
        if isinstance(outcome, Document):
            if outcome.text.strip():
                result.documents.append(outcome)
        elif isinstance(outcome, str):
            result.not_modified.append(outcome)
        else:
            result.errors.append(outcome)
    return result


def _conditional_headers(validators: tuple[str | None, str | None] | None) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from a page's last validators (none: a plain GET)."""
    etag, last_modified = validators or (None, None)
    headers = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


async def load_sitemap(url: str, *, client: httpx.AsyncClient, validators: Validators | None = None) -> LoadResult:
    """Pages listed by a sitemap (or sitemap index), minus those robots.txt disallows. A child
    sitemap that fails is recorded as an error and the pages of the others still load."""
    robots = await _robots(url, client=client)
    sitemap_errors: list[tuple[str, str]] = []
    pages = await _sitemap_urls(url, client=client, depth=0, errors=sitemap_errors)
    allowed = [p for p in pages if robots is None or robots.can_fetch(USER_AGENT, p)]
    skipped = len(pages) - len(allowed)
    if skipped:
        log.info("robots.txt disallows sitemap pages", extra={"sitemap": url, "skipped": skipped})
    result = await load_urls(allowed, client=client, validators=validators)
    result.errors[:0] = sitemap_errors
    result.listing_incomplete = bool(sitemap_errors)
    return result


# -- helpers ---------------------------------------------------------------------------------


def _client(client: httpx.AsyncClient | None) -> httpx.AsyncClient:
    if client is not None:
        return _Borrowed(client)  # type: ignore[return-value]
    return httpx.AsyncClient(timeout=TIMEOUT, headers={"User-Agent": USER_AGENT})


class _Borrowed:
    """Async context manager that lends a caller's client without closing it."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def __aenter__(self) -> httpx.AsyncClient:
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _robots(url: str, *, client: httpx.AsyncClient) -> RobotFileParser | None:
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
        raise SourceError(f"robots.txt {robots_url} could not be fetched ({_describe(exc, client.timeout)}); {refusal}") from None
    if response.status_code >= 500:
        raise SourceError(f"robots.txt {robots_url} answered {response.status_code}; {refusal}")
    if response.status_code >= 400:
        return None
    parser = RobotFileParser(robots_url)
    parser.parse(response.text.splitlines())
    return parser


async def _sitemap_urls(url: str, *, client: httpx.AsyncClient, depth: int, errors: list[tuple[str, str]]) -> list[str]:
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
            pages.extend(await _sitemap_urls(child, client=client, depth=depth + 1, errors=errors))
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
        raise SourceError(f"sitemap {url} could not be fetched: {_describe(exc, client.timeout)}") from None
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


def _describe(exc: BaseException, timeout: httpx.Timeout | None = None) -> str:
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


def _read_file(file: Path, doc_id: str) -> Document:
    fmt = _SUFFIXES[file.suffix.lower()]
    if fmt == "pdf":
        title, text = pdf_text(file.read_bytes())
        return Document(doc_id, title or file.stem, None, text, "pdf")
    raw = decode_text(file.read_bytes(), markup=fmt == "html")
    if fmt == "html":
        title, text = html_to_markdown(raw)
        return Document(doc_id, title or file.stem, None, text, "html")
    title = None
    if fmt == "markdown":
        title, raw = split_front_matter(raw)
        title = title or first_heading(raw)
    return Document(doc_id, title or file.stem.replace("-", " ").replace("_", " "), None, raw, fmt)


def _from_response(url: str, response: httpx.Response) -> Document:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    path = urlsplit(url).path.lower()
    fallback_title = path.rstrip("/").rsplit("/", 1)[-1] or urlsplit(url).netloc
    if kind == "application/pdf" or path.endswith(".pdf"):
        title, text = pdf_text(response.content)
        return Document(url, title or fallback_title, url, text, "pdf")
    if kind in ("text/plain",):
        return Document(url, fallback_title, url, _body_text(response), "text")
    if kind in ("text/markdown", "text/x-markdown") or path.endswith((".md", ".markdown")):
        title, text = split_front_matter(_body_text(response))
        return Document(url, title or first_heading(text) or fallback_title, url, text, "markdown")
    if kind and "html" not in kind and "xml" not in kind:
        raise ValueError(f"unsupported content type {kind!r}")
    title, text = html_to_markdown(_body_text(response, markup=True), url=url)
    return Document(url, title or fallback_title, url, text, "html")


def _body_text(response: httpx.Response, *, markup: bool = False) -> str:
    # Not `response.text`: with no charset in Content-Type httpx assumes UTF-8, which misreads a page
    # that declares its charset only in <meta>, and it keeps a BOM.
    return decode_text(response.content, declared=response.charset_encoding, markup=markup)


def html_to_markdown(html: str, *, url: str | None = None) -> tuple[str | None, str]:
    """(title, main text as Markdown) with navigation, header, footer and scripts dropped."""
    import trafilatura

    options = dict(output_format="markdown", include_tables=True, include_formatting=True, include_links=False)
    text = trafilatura.extract(html, url=url, favor_recall=True, **options)
    if not text:
        # Very short pages fall under trafilatura's main-text heuristics; take the body as it is.
        text = trafilatura.html2txt(html) or ""
    meta = trafilatura.extract_metadata(html, default_url=url)
    return (meta.title if meta and meta.title else None), text


def pdf_text(data: bytes) -> tuple[str | None, str]:
    """(title, text as Markdown) of a PDF: headings and paragraphs recovered from its layout (`rag.pdf`)."""
    from rag.pdf import pdf_markdown

    return pdf_markdown(data)


