"""Knowledge sources: a directory, a list of URLs, or a sitemap, loaded into `Document`s.

HTML is reduced to its main text, as Markdown, by `rag.html_text`. PDF text comes from pypdf, with headings and paragraphs
recovered from font sizes and line gaps (`rag.pdf`), also as Markdown. A source that cannot be read at
all raises `SourceError`; a single page, file or child sitemap that fails (HTTP error, malformed
URL, broken PDF, binary content) is recorded in `LoadResult.errors` with its URL or path and the
rest still load (ingest then keeps that document's previous chunks). Text is decoded by
`rag.decoding`: BOM, declared charset, UTF-8, then a legacy charset.

Sitemaps honour robots.txt (`rag.crawl`; `rag.sitemap` lists their pages). An explicit `urls` list is the
owner's own choice of pages, so it is fetched as given. Every fetch goes through `rag.crawl.fetch`:
redirects only within the page's own site, and bodies read up to a cap.

Pages are fetched conditionally when the last fetch left validators (`ETag`, `Last-Modified`): a
`304 Not Modified` lands in `LoadResult.not_modified` and ingest keeps that page's chunks, so a
scheduled run over an unchanged site downloads almost nothing. A sitemap's page whose `<lastmod>` is
the one it had when it was last read is not even asked for (`not_modified` too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urldefrag, urlsplit

import httpx

from gateway.capped_body import megabytes
from gateway.errors import IN_RUN_ERRORS, SKIPPED_FILES, SourceError
from gateway.settings import SourceSettings
from rag.blocks import first_heading, split_front_matter
from rag.crawl import USER_AGENT, Pace, describe_fetch_error, fetch, robots_rules
from rag.crawl_bounds import crawl_client
from rag.decoding import decode_text
from rag.directory_walk import DOCUMENT_TYPES_NOT_READ, broken_link, describe_skipped, files_under, is_hidden, within
from rag.html_text import html_to_markdown
from rag.ingest_progress import Progress
from rag.page_open import LeadsOutside, open_page
from rag.pdf import pdf_text
from rag.sitemap import sitemap_urls

log = logging.getLogger(__name__)

TIMEOUT = httpx.Timeout(15.0, connect=5.0)
MAX_CONCURRENCY = 4
MAX_TEXT_FILE_BYTES = 20 * 1024 * 1024
MAX_PDF_FILE_BYTES = 200 * 1024 * 1024
"""A directory's files past these are that file's error, not read: a log file or a database dump left
in the folder would otherwise be read whole into memory and tokenized for hours. A PDF's bytes are mostly
its images, so it may be larger. (A fetched page or PDF is capped at `rag.crawl.MAX_PAGE_BYTES`.)"""
Format = Literal["markdown", "text", "html", "pdf"]
_SUFFIXES: dict[str, Format] = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".html": "html", ".htm": "html", ".pdf": "pdf"}


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
    lastmod: str | None = None  # its sitemap's <lastmod> when it was read (`rag.sitemap`)


Validators = dict[str, tuple[str | None, str | None, str | None]]
"""URL -> (ETag, Last-Modified, sitemap <lastmod>) from the page's last fetch."""


@dataclass
class LoadResult:
    """What a source yielded: documents, (doc_id, message) for each item that failed, and the pages
    the server said are unchanged since the validators given (304)."""

    documents: list[Document] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    not_modified: list[str] = field(default_factory=list)
    lastmods: dict[str, str] = field(default_factory=dict)  # a sitemap's pages' <lastmod> (`rag.sitemap`)
    # A child sitemap failed: pages missing from this listing may still exist, so none is deleted.
    listing_incomplete: bool = False
    gone: list[str] = field(default_factory=list)  # pages that answered 410: their chunks are deleted
    # A directory's files of a type it does not read, by suffix ("" for none): {".docx": 2}.
    skipped: Counter[str] = field(default_factory=Counter)
    # Symlinks out of a directory's folder, not read: errors, yet their chunks are deleted, not kept.
    refused: list[tuple[str, str]] = field(default_factory=list)


async def load_source(source: SourceSettings, *, client: httpx.AsyncClient | None = None, base_dir: Path | None = None,
                      validators: Validators | None = None, progress: Progress | None = None) -> LoadResult:
    """Load any configured source. Relative directory paths resolve against `base_dir`; pages with
    `validators` are fetched conditionally; `progress` is told (pages fetched, pages listed) as pages
    come in (a crawl under a robots.txt Crawl-delay takes minutes before any document is ingested)."""
    if source.type == "directory":
        path = Path(source.path or "")
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return await load_directory(path, follow_symlinks_outside=source.follow_symlinks_outside)
    async with _client(client) as http:
        if source.type == "urls":
            return await load_urls(source.urls, client=http, validators=validators, progress=progress)
        # DESIGN.md gives a sitemap source `urls` too: each is read, and their pages are one listing.
        merged = LoadResult()
        for sitemap in dict.fromkeys([*([source.url] if source.url else []), *source.urls]):
            one = await load_sitemap(sitemap, client=http, validators=validators, progress=progress)
            known = {d.doc_id for d in merged.documents}  # a page two sitemaps list is one document
            merged.documents += [d for d in one.documents if d.doc_id not in known]
            merged.errors += one.errors
            merged.not_modified += one.not_modified
            merged.lastmods = {**one.lastmods, **merged.lastmods}
            merged.gone += one.gone
            merged.listing_incomplete |= one.listing_incomplete
        # What one sitemap fetched (its <lastmod> moved) is the page now, not `not_modified` by another's old one.
        merged.not_modified = list(set(merged.not_modified) - {d.doc_id for d in merged.documents})
        return merged


async def load_directory(path: Path, *, follow_symlinks_outside: bool = False) -> LoadResult:
    """Every .md/.txt/.html/.htm/.pdf file under `path`, recursively, with relative-path ids.

    Hidden files and folders (`.git/`, `.obsidian/`, `.~draft.md`) are skipped: they are tool state and
    editor leftovers, not knowledge, and a `.git/` folder can hold old copies of every page. A symlink
    (to a page or a folder) whose target is outside `path` is `refused` unless `follow_symlinks_outside`."""
    if path.exists() and not path.is_dir():
        raise SourceError(f"knowledge directory is a file, not a folder: {path} (name the folder that holds it)")
    if not path.is_dir():
        # A relative path is read from the working directory, not the config file's: say where it looked.
        where = "" if path.is_absolute() else f" (looked for {path.resolve()}: a relative path is read from the working directory)"
        raise SourceError(f"knowledge directory not found: {path}{where}")
    result = LoadResult()
    files, outside, unreadable = files_under(path, follow_outside=follow_symlinks_outside)
    for link in outside:  # folders
        _refuse(result, link.relative_to(path).as_posix(), link, "a folder")
    for exc in unreadable:  # its pages may be there still: none of the source's chunks is deleted as gone
        if (folder := f"{Path(exc.filename).relative_to(path).as_posix()}/") == "./":
            raise SourceError(f"knowledge directory cannot be listed: {describe_fetch_error(exc)}")
        if not is_hidden(folder):
            _failed(result, folder, f"folder not read, its pages' chunks kept: {describe_fetch_error(exc)}")
            result.listing_incomplete = True
    inside = os.path.realpath(path)
    for file in files:
        doc_id = file.relative_to(path).as_posix()
        if is_hidden(doc_id):
            continue
        if file.is_symlink() and not file.exists() and file.suffix.lower() in _SUFFIXES:
            # A page the folder names but cannot read (its target moved): said, not silently left out.
            _failed(result, doc_id, broken_link(file))
            continue
        if not file.is_file() and (follow_symlinks_outside or within(os.path.realpath(file), inside)):
            continue  # (a link out of the folder to a device or a FIFO goes on, to be refused as it is opened)
        if (suffix := file.suffix.lower()) not in _SUFFIXES:
            result.skipped[suffix] += 1
            continue
        try:
            doc = await asyncio.to_thread(_read_file, file, doc_id, None if follow_symlinks_outside else inside)
        except LeadsOutside:  # checked as it is opened: a page swapped for a link since the walk is refused too
            _refuse(result, doc_id, file, "a file")
            continue
        except FileNotFoundError:  # deleted since the walk listed it: gone, as if the walk came a moment later
            log.info("source.file_vanished", extra={"doc_id": doc_id, "effect": "its chunks are removed"})
            continue
        except Exception as exc:  # one unreadable file must not stop the others
            _failed(result, doc_id, describe_fetch_error(exc))
            continue
        if doc.text.strip():
            result.documents.append(doc)
    if result.skipped:
        # Said once per run, not per file: a folder of exported .docx files is one mistake, not fifty. A
        # warning when some look like documents someone meant to be read (`gateway ingest` shows warnings
        # only: forty .docx files were left out without a word); images and the like are only logged.
        documents = Counter({k: n for k, n in result.skipped.items() if k in DOCUMENT_TYPES_NOT_READ})
        log.log(logging.WARNING if documents else logging.INFO, "source.files_not_read",
                extra={"path": str(path), "skipped": describe_skipped(documents or result.skipped), SKIPPED_FILES: True})
    return result


def _failed(result: LoadResult, doc_id: str, message: str) -> None:
    log.warning("source.file_failed", extra={"doc_id": doc_id, "error": message, IN_RUN_ERRORS: True})
    result.errors.append((doc_id, message))


def _refuse(result: LoadResult, doc_id: str, link: Path, what: str) -> None:
    """A symlink out of the source's folder, not read: that path's error (hidden ones quietly)."""
    if is_hidden(doc_id):
        return
    message = (f"not read: a symlink to {what} outside the source's folder (anyone who can write to the "
               "folder could make the bot serve any file of this server); set `follow_symlinks_outside: true` "
               "on the source to read it")
    log.warning("source.file_failed",
                extra={"doc_id": doc_id, "error": message, "target": os.path.realpath(link), IN_RUN_ERRORS: True})
    result.refused.append((doc_id, message))


GONE = object()  # what fetching a page that answered 410 gives `load_urls`
_HOST_DOWN = (httpx.ConnectError, httpx.ConnectTimeout)  # the host unreachable (refused, no route, no name)


async def load_urls(urls: list[str], *, client: httpx.AsyncClient, validators: Validators | None = None,
                    allowed: Callable[[str], bool] | None = None, delay: float | None = None,
                    progress: Progress | None = None) -> LoadResult:
    """Fetch each page (a few at a time, or one at a time `delay` seconds apart, and so after the site answers
    429, at the pace it asks: `rag.crawl.Pace`); a failing URL is recorded and the others continue. A page that
    answers `410 Gone` is left out, so ingest removes its chunks (a 404 may be a passing mistake, so it is an
    error that keeps them). `allowed` (robots.txt) is asked at every redirect."""
    result = LoadResult()
    gate = asyncio.Semaphore(1 if delay else MAX_CONCURRENCY)
    validators = validators or {}
    pace = Pace(delay)
    unreachable: dict[str, list[str]] = {}  # host -> the errors of its pages that could not connect

    async def one(url: str) -> Document | tuple[str, str] | str | object | None:  # a page, (url, error), a 304's url, GONE
        for attempt in (1, 2):  # the second only after a 429, at the pace the site asked for
            async with gate:
                try:
                    conditional = _conditional_headers(validators.get(url))
                    async with pace.turn():
                        response = await fetch(url, client=client, headers=conditional, allowed=allowed)
                        slowed = pace.slowed_down_by(response)
                    if attempt == 1 and slowed:
                        continue
                    if response.status_code == 304 and conditional:
                        return url  # unchanged since its validators: ingest keeps its chunks
                    if response.status_code == 410:
                        log.info("source.url_gone", extra={"url": url, "status": 410, "effect": "its chunks are removed"})
                        return GONE
                    response.raise_for_status()
                    # In a thread, as a directory's files are read: a long PDF or a 10 MB page takes seconds
                    # to parse, and on the event loop that froze the server's web chat and health checks.
                    page = await asyncio.to_thread(_from_response, url, response)
                    return replace(page, etag=response.headers.get("etag"), last_modified=response.headers.get("last-modified"))
                except Exception as exc:  # HTTP error, malformed URL, broken PDF, binary body: this page only
                    # The error is recorded as "<url>: <message>"; `fetch` names the URL too (its sitemap and
                    # robots.txt callers need that), which said it twice.
                    message = describe_fetch_error(exc, client.timeout).replace(f"{url}: ", "", 1)
                    message = message.removeprefix(f"{url} ")  # "<url> redirects to another site …"
                    if isinstance(exc, _HOST_DOWN):  # said once per host below, not once per page
                        unreachable.setdefault(urlsplit(url).netloc, []).append(message)
                    else:
                        log.warning("source.url_failed", extra={"url": url, "error": message, IN_RUN_ERRORS: True})
                    return (url, message)
        return None  # not reached: the second attempt returns

    # A fragment is never sent to the server: `one.html` and `one.html#section` are one page, fetched
    # and stored once (under the first form listed), not twice with every chunk doubled.
    pages: dict[str, str] = {}
    for url in urls:
        pages.setdefault(urldefrag(url).url, url)
    unique = list(pages.values())
    fetched = 0

    async def counted(url: str):
        nonlocal fetched
        outcome = await one(url)
        fetched += 1
        if progress is not None:
            progress(fetched, len(unique))
        return outcome

    if progress is not None and unique:
        progress(0, len(unique))
    outcomes = await asyncio.gather(*(counted(u) for u in unique))
    for host, messages in unreachable.items():
        # One line per host that is down, with how many of its pages failed: a `urls` source of 300 pages
        # on a host that was down logged 300 lines of the same error. Each page is still the run's error.
        log.warning("source.host_unreachable", extra={
            "host": host, "failed": len(messages), "pages": sum(1 for u in unique if urlsplit(u).netloc == host),
            "error": messages[0], IN_RUN_ERRORS: True})
    for url, outcome in zip(unique, outcomes):
        if isinstance(outcome, Document):
            if outcome.text.strip():
                result.documents.append(outcome)
        elif isinstance(outcome, tuple):
            result.errors.append(outcome)
        elif outcome is GONE:
            result.gone.append(url)
        elif isinstance(outcome, str):
            result.not_modified.append(outcome)
    return result


def _conditional_headers(validators: tuple[str | None, str | None, str | None] | None) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from a page's last validators (none: a plain GET)."""
    etag, last_modified, _ = validators or (None, None, None)
    headers = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


async def load_sitemap(url: str, *, client: httpx.AsyncClient, validators: Validators | None = None,
                       progress: Progress | None = None) -> LoadResult:
    """Pages listed by a sitemap (or sitemap index), minus those robots.txt disallows. A child
    sitemap that fails is recorded as an error and the pages of the others still load."""
    robots = await robots_rules(url, client=client)
    sitemap_errors: list[tuple[str, str]] = []
    listed = await sitemap_urls(url, client=client, depth=0, errors=sitemap_errors)
    pages = list(listed)
    allowed = [p for p in pages if robots is None or robots.allows(p)]
    skipped = len(pages) - len(allowed)
    if skipped:
        # A warning, with the count and one of them: at info level `gateway ingest` never showed it, and a
        # sitemap of 500 pages gave 20 documents without a word about the other 480.
        log.warning("sitemap.robots_disallowed", extra={"sitemap": url, "skipped": skipped, "listed": len(pages),
                                                        "example": next(p for p in pages if not robots.allows(p))})
    # Not fetched at all: a page whose <lastmod> is the one it had when it was last read (ingest keeps its chunks).
    known = validators or {}
    same = [p for p in allowed if listed[p] is not None and p in known and known[p][2] == listed[p]]
    if same:
        log.info("sitemap.lastmod_unchanged", extra={"sitemap": url, "not_fetched": len(same), "listed": len(pages)})
    result = await load_urls([p for p in allowed if p not in set(same)], client=client, validators=validators,
                             allowed=robots.allows if robots is not None else None,
                             delay=robots.delay() if robots is not None else None, progress=progress)
    result.documents = [replace(doc, lastmod=listed.get(doc.doc_id)) for doc in result.documents]
    result.not_modified += same
    result.lastmods = {page: lastmod for page, lastmod in listed.items() if lastmod is not None}
    result.errors[:0] = sitemap_errors
    result.listing_incomplete = bool(sitemap_errors)
    return result


# -- helpers ---------------------------------------------------------------------------------


def _client(client: httpx.AsyncClient | None) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
    """The caller's client, lent without closing it, or a new one closed after use."""
    if client is not None:
        return contextlib.nullcontext(client)
    return crawl_client(timeout=TIMEOUT, headers={"User-Agent": USER_AGENT})


def _read_file(file: Path, doc_id: str, inside: str | None) -> Document:
    fmt = _SUFFIXES[file.suffix.lower()]
    cap = MAX_PDF_FILE_BYTES if fmt == "pdf" else MAX_TEXT_FILE_BYTES
    with open_page(file, inside) as page:  # opened once, within `inside` (None: anywhere): `open_page` says why
        if (size := os.fstat(page.fileno()).st_size) > cap:
            raise SourceError(f"{megabytes(size)}, larger than the {megabytes(cap)} a {fmt} file may be; not read")
        data = page.read(cap)  # no more, if it grew since
    if fmt == "pdf":
        title, text = pdf_text(data, name=doc_id)
        return Document(doc_id, title or file.stem, None, text, "pdf")
    raw = decode_text(data, markup=fmt == "html")
    if fmt == "html":
        title, text = html_to_markdown(raw)
        return Document(doc_id, title or file.stem, None, text, "html")
    _require_text(raw, "file")
    title = None
    if fmt == "markdown":
        # Front matter alone is no error: a site generator's section page (Hugo's `_index.md`) is only a
        # title, and made every run of its source partial. It has nothing to index, and is left out.
        title, raw = split_front_matter(raw)
        title = title or first_heading(raw)
    return Document(doc_id, title or file.stem.replace("-", " ").replace("_", " "), None, raw, fmt)


def _from_response(url: str, response: httpx.Response) -> Document:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    path = urlsplit(url).path.lower()
    fallback_title = path.rstrip("/").rsplit("/", 1)[-1] or urlsplit(url).netloc
    # A download link serves a PDF as application/octet-stream (S3's default), with no .pdf in its URL.
    if kind == "application/pdf" or path.endswith(".pdf") or response.content[:1024].lstrip().startswith(b"%PDF-"):
        title, text = pdf_text(response.content, name=url)
        return Document(url, title or fallback_title, url, text, "pdf")
    # Raw Markdown is often served as text/plain (GitHub's raw files) or with no type; a .md URL that
    # answers with an HTML page (a repository's file view) is that page.
    markdown_path = path.endswith((".md", ".markdown"))
    if kind in ("text/markdown", "text/x-markdown") or markdown_path and kind in ("", "text/plain",
                                                                                   "application/octet-stream"):
        title, text = split_front_matter(_body_text(response))
        return Document(url, title or first_heading(text) or fallback_title, url, _require_text(text, "page"), "markdown")
    if kind in ("text/plain",):
        return Document(url, fallback_title, url, _require_text(_body_text(response), "page"), "text")
    if kind and "html" not in kind and "xml" not in kind:
        raise SourceError(f"unsupported content type {kind!r}: a page is read as HTML, Markdown, plain text or PDF")
    title, text = html_to_markdown(_body_text(response, markup=True), url=url)
    return Document(url, title or fallback_title, url, text, "html")


def _require_text(text: str, what: str) -> str:
    """`text`, unless there is none: an empty Markdown or text file or page (a sync that truncated it, a
    server answering 200 with no body) was left out without a word, and ingest deleted its chunks."""
    if not text.strip():
        raise SourceError(f"the {what} is empty (nothing but white space)")
    return text


def _body_text(response: httpx.Response, *, markup: bool = False) -> str:
    # Not `response.text`: with no charset in Content-Type httpx assumes UTF-8, which misreads a page
    # that declares its charset only in <meta>, and it keeps a BOM.
    return decode_text(response.content, declared=response.charset_encoding, markup=markup)
