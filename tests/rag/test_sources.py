"""Source loaders: a directory of md/txt/html/pdf, URL lists and sitemaps (robots.txt honoured)."""

from __future__ import annotations

import logging
import os

import httpx
import pytest

from gateway.settings import SourceSettings
from rag.html_text import html_to_markdown
from rag.sources import SourceError, describe_skipped, load_directory, load_sitemap, load_source, load_urls, pdf_text
from tests.rag.pdfs import tiny_pdf

HTML = """<html><head><title>Billing help</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About us</a></nav>
<header>Acme header banner</header>
<main><h1>Billing</h1><p>You can pay every plan by card, bank transfer or invoice each month.</p>
<h2>Refunds</h2><p>Refunds are processed within five business days of the request.</p></main>
<footer>Copyright Acme footer text</footer><script>var tracking = 1;</script></body></html>"""


async def test_load_directory_reads_markdown_text_html_and_pdf(tmp_path):
    (tmp_path / "guide.md").write_text("# Setup guide\n\nInstall it.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("Plain notes.\n\nSecond paragraph.")
    (tmp_path / "billing.html").write_text(HTML)
    (tmp_path / "manual.pdf").write_bytes(tiny_pdf("Warranty covers two years of repairs"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    result = await load_directory(tmp_path)
    docs = {d.doc_id: d for d in result.documents}
    assert set(docs) == {"guide.md", "sub/notes.txt", "billing.html", "manual.pdf"}
    assert docs["guide.md"].title == "Setup guide" and docs["guide.md"].format == "markdown"
    assert "Warranty covers two years" in docs["manual.pdf"].text
    html = docs["billing.html"]
    assert html.title == "Billing"  # trafilatura prefers the page heading to <title>
    assert "## Refunds" in html.text  # headings kept as Markdown for the chunker
    assert "footer" not in html.text and "tracking" not in html.text and "About us" not in html.text
    assert result.errors == []


async def test_load_directory_skips_hidden_files_and_folders(tmp_path):
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "old-faq.md").write_text("# FAQ\n\nAn old answer from history.")
    (tmp_path / "drafts").mkdir()
    (tmp_path / "drafts" / ".~faq.md").write_text("an editor's lock file")
    (tmp_path / "drafts" / "next.md").write_text("# Next\n\nComing soon.")
    result = await load_directory(tmp_path)
    assert sorted(d.doc_id for d in result.documents) == ["drafts/next.md", "faq.md"]


async def test_load_directory_does_not_walk_into_hidden_folders(tmp_path, monkeypatch):
    """A `.git/` of thousands of object folders was walked to its last one, then every file of it left out."""
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.")
    for hidden in (".git/objects/ab", "docs/.obsidian/plugins"):
        (tmp_path / hidden).mkdir(parents=True)
        (tmp_path / hidden / "page.md").write_text("# Hidden\n\nNot knowledge.")
    listed: list[str] = []
    scandir = os.scandir

    def recording(path="."):
        listed.append(os.path.relpath(path, tmp_path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", recording)
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"]
    assert sorted(listed) == [".", "docs"]  # neither hidden folder was listed


async def test_load_directory_counts_the_files_of_types_it_does_not_read(tmp_path, caplog):
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.")
    for name in ("manual.docx", "guide.DOCX", "data.json", "LICENSE", ".hidden.docx"):
        (tmp_path / name).write_text("x")
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"]
    assert result.skipped == {".docx": 2, ".json": 1, "": 1}  # hidden files are tool state, not counted
    assert describe_skipped(result.skipped) == ".docx (2), (no suffix) (1), .json (1)"
    # Documents someone meant to be read are a warning, which `gateway ingest` shows; images only a log line.
    [said] = [r for r in caplog.records if r.getMessage() == "source.files_not_read"]
    assert (said.levelname, said.skipped) == ("WARNING", ".docx (2)")
    for name in ("manual.docx", "guide.DOCX"):
        (tmp_path / name).unlink()
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rag.sources"):
        await load_directory(tmp_path)
    assert [r.levelname for r in caplog.records if r.getMessage() == "source.files_not_read"] == ["INFO"]
    many = {f".x{i}": 1 for i in range(7)}
    assert describe_skipped(many) == ".x0 (1), .x1 (1), .x2 (1), .x3 (1), .x4 (1) and 2 more"


async def test_load_directory_records_a_broken_file_and_keeps_the_rest(tmp_path):
    (tmp_path / "ok.md").write_text("# Fine\n\ntext")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["ok.md"]
    assert [doc_id for doc_id, _ in result.errors] == ["broken.pdf"]


async def test_load_source_missing_directory_raises():
    with pytest.raises(SourceError, match="not found"):
        await load_source(SourceSettings(name="kb", type="directory", path="/nonexistent/kb"))


def test_pdf_text_extracts_page_text():
    _, text = pdf_text(tiny_pdf("Hello from a PDF"))
    assert text == "Hello from a PDF"


def fake_site(pages: dict[str, tuple[int, str, str]]):
    """An httpx client whose transport serves `pages` (path -> status, content type, body) and logs requests."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        status, kind, body = pages.get(request.url.path, (404, "text/plain", "not found"))
        return httpx.Response(status, headers={"content-type": kind}, text=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler)), seen


async def test_load_urls_failing_url_recorded_others_continue():
    client, _ = fake_site({"/billing": (200, "text/html", HTML), "/notes.txt": (200, "text/plain", "Just notes.")})
    async with client:
        result = await load_urls(["https://help.example/billing", "https://help.example/gone", "https://help.example/notes.txt"], client=client)
    assert sorted(d.doc_id for d in result.documents) == ["https://help.example/billing", "https://help.example/notes.txt"]
    assert result.documents[0].url == result.documents[0].doc_id
    assert [u for u, _ in result.errors] == ["https://help.example/gone"]
    assert "404" in result.errors[0][1]


async def test_load_sitemap_follows_index_and_honours_robots(caplog):
    index = """<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <sitemap><loc>https://help.example/sitemap-docs.xml</loc></sitemap></sitemapindex>"""
    urlset = """<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <url><loc>https://help.example/billing</loc></url>
      <url><loc>https://help.example/private/salaries</loc></url></urlset>"""
    client, seen = fake_site({
        "/robots.txt": (200, "text/plain", "User-agent: *\nDisallow: /private/\n"),
        "/sitemap.xml": (200, "application/xml", index),
        "/sitemap-docs.xml": (200, "application/xml", urlset),
        "/billing": (200, "text/html", HTML),
        "/private/salaries": (200, "text/html", "<html><body><p>secret salary table for all staff</p></body></html>"),
    })
    async with client:
        result = await load_sitemap("https://help.example/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == ["https://help.example/billing"]
    assert "/private/salaries" not in seen  # never fetched, not merely dropped
    # Said where `gateway ingest` shows it (warnings): at info level the pages went missing without a word.
    [said] = [r for r in caplog.records if r.getMessage() == "sitemap.robots_disallowed"]
    assert said.levelname == "WARNING"
    assert (said.skipped, said.listed, said.example) == (1, 2, "https://help.example/private/salaries")


async def test_load_sitemap_unreachable_raises_source_error():
    client, _ = fake_site({})
    async with client:
        with pytest.raises(SourceError, match="sitemap"):
            await load_sitemap("https://help.example/sitemap.xml", client=client)


@pytest.mark.parametrize("head, body, title", [
    ('<meta property="og:title" content="Plans and prices">', "<h1>Pricing</h1>", "Plans and prices"),
    ('<script type="application/ld+json">{"@context": "https://schema.org", "@type": "NewsArticle", '
     '"headline": "Reset your password"}</script>',
     "<h1>Passwords</h1>", "Reset your password"),
    ('<script type="application/ld+json">{not json</script><title>Shipping</title>', "<p>Two days.</p>", "Shipping"),
    ("<title>Opening hours | Acme</title>", "<h1>Opening hours</h1>", "Opening hours"),
    ("", "<p>No heading, no title: Monday 2024-01-03, 3 Jan 2024, le 3 janvier.</p>", None),
])
def test_a_page_title_is_the_one_trafilatura_metadata_gives(head, body, title):
    """The title comes from meta tags, JSON-LD, then the heading or <title>, as trafilatura's metadata
    reads it, without that call's date search (dateparser over every locale, 88 ms a page)."""
    import trafilatura

    page = f"<html><head>{head}</head><body>{body}<p>Some text about it for the page.</p></body></html>"
    got, _ = html_to_markdown(page)
    expected = trafilatura.extract_metadata(page)
    assert got == (expected.title if expected else None) == title


async def test_a_markdown_url_served_as_plain_text_is_markdown_and_an_html_view_of_one_is_html():
    """Raw Markdown is often served as text/plain (GitHub's raw files); a repository's view of that file
    is an HTML page."""
    raw = "---\ntitle: Refund policy\n---\n# Refunds\n\n## Timing\n\nWithin five business days.\n"
    client, _ = fake_site({"/raw/refunds.md": (200, "text/plain; charset=utf-8", raw),
                           "/blob/refunds.md": (200, "text/html", HTML)})
    async with client:
        result = await load_urls(["https://help.example/raw/refunds.md", "https://help.example/blob/refunds.md"],
                                 client=client)
    docs = {d.doc_id.rsplit("/", 2)[-2]: d for d in result.documents}
    assert docs["raw"].format == "markdown" and docs["raw"].title == "Refund policy"
    assert "title:" not in docs["raw"].text and "## Timing" in docs["raw"].text
    assert docs["blob"].format == "html" and "Refunds are processed" in docs["blob"].text


async def test_a_sitemap_source_reads_every_sitemap_it_lists():
    """DESIGN.md gives a source `path` or `urls`: a sitemap source with two sitemaps in `urls` read only
    the first."""
    def urlset(*paths: str) -> str:
        locs = "".join(f"<url><loc>https://help.example{p}</loc></url>" for p in paths)
        return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'

    client, _ = fake_site({"/robots.txt": (200, "text/plain", "User-agent: *\nAllow: /\n"),
                           "/docs.xml": (200, "application/xml", urlset("/billing")),
                           "/blog.xml": (200, "application/xml", urlset("/notes.txt", "/billing")),
                           "/billing": (200, "text/html", HTML), "/notes.txt": (200, "text/plain", "Just notes.")})
    source = SourceSettings(name="site", type="sitemap",
                            urls=["https://help.example/docs.xml", "https://help.example/blog.xml"])
    async with client:
        result = await load_source(source, client=client)
    assert sorted(d.doc_id for d in result.documents) == ["https://help.example/billing",
                                                          "https://help.example/notes.txt"]


async def test_an_empty_text_or_markdown_page_is_its_error_not_left_out():
    """A 200 with no text was left out without a word, and ingest deleted the page's chunks."""
    client, _ = fake_site({"/notes.txt": (200, "text/plain", ""), "/raw/faq.md": (200, "text/markdown", "\n\n")})
    async with client:
        result = await load_urls(["https://help.example/notes.txt", "https://help.example/raw/faq.md"], client=client)
    assert not result.documents
    assert [message.split(" (")[0] for _, message in result.errors] == ["the page is empty"] * 2


async def test_a_fetched_page_is_parsed_off_the_event_loop(monkeypatch):
    """A 200-page PDF took 1.3 s to parse and a 3 MB page 0.9 s, on the server's event loop: its web
    chat, webhooks and health checks waited for every one. A directory's files were already read in a thread."""
    import threading

    import rag.sources

    parsed_on: list[int] = []

    def spy(real):
        def parse(*args, **kwargs):
            parsed_on.append(threading.get_ident())
            return real(*args, **kwargs)
        return parse

    monkeypatch.setattr(rag.sources, "html_to_markdown", spy(rag.sources.html_to_markdown))
    monkeypatch.setattr(rag.sources, "pdf_text", spy(rag.sources.pdf_text))
    client, _ = fake_site({"/billing": (200, "text/html", HTML)})
    pdf = httpx.Response(200, headers={"content-type": "application/pdf"}, content=tiny_pdf("Warranty covers two years"))
    pdf_client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: pdf))
    async with client, pdf_client:
        pages = await load_urls(["https://help.example/billing"], client=client)
        pdfs = await load_urls(["https://help.example/warranty.pdf"], client=pdf_client)
    assert len(pages.documents) == len(pdfs.documents) == 1
    assert len(parsed_on) == 2 and threading.get_ident() not in parsed_on


async def test_a_page_of_another_type_or_without_text_says_what_it_is_not_which_exception():
    """"! <url>: ValueError: unsupported content type 'image/png'" read like a crash of the gateway."""
    client, _ = fake_site({"/logo.png": (200, "image/png", "\x89PNG"),
                           "/app": (200, "text/html", "<html><body><div id=app></div><script>x()</script></body></html>")})
    async with client:
        result = await load_urls(["https://help.example/logo.png", "https://help.example/app"], client=client)
    errors = dict(result.errors)
    assert errors["https://help.example/logo.png"] == ("unsupported content type 'image/png': a page is read as HTML, "
                                                       "Markdown, plain text or PDF")
    assert errors["https://help.example/app"].startswith("no main text: the page holds only navigation")


async def test_a_host_that_is_down_is_one_log_line_with_a_count_and_each_page_is_still_an_error(caplog):
    """A `urls` source of 300 pages on a host that was down logged 300 lines of the same error."""
    from aiohttp import web

    from tests.fakes.web_server import serving

    app = web.Application()
    app.router.add_get("/{page}", lambda request: web.Response(text=HTML, content_type="text/html"))
    async with serving(app) as down:
        pass  # closed again: nothing listens on its port now
    async with serving(app) as up, httpx.AsyncClient(timeout=5) as client:
        urls = [f"{down}/{name}" for name in ("billing", "refunds", "plans")] + [f"{up}/billing"]
        result = await load_urls(urls, client=client)
    assert [d.doc_id for d in result.documents] == [f"{up}/billing"]
    assert sorted(url for url, _ in result.errors) == sorted(urls[:3])  # every page is the run's error
    assert not [r for r in caplog.records if r.getMessage() == "source.url_failed"]
    [said] = [r for r in caplog.records if r.getMessage() == "source.host_unreachable"]
    assert (said.host, said.failed, said.pages) == (down.removeprefix("http://"), 3, 3)
    assert said.levelname == "WARNING" and said.error.startswith("ConnectError")


async def test_a_file_deleted_while_the_source_is_read_is_gone_not_an_error(tmp_path, monkeypatch):
    """It was "FileNotFoundError: [Errno 2] …", a partial run, and its chunks kept until the next run,
    while a file deleted a moment earlier was simply not there."""
    import rag.sources

    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (tmp_path / "draft.md").write_text("# Draft\n\nSoon gone.\n")
    read = rag.sources._read_file

    def deleted_first(file, *args):  # the file goes between the walk and its reading
        if file.name == "draft.md":
            file.unlink()
        return read(file, *args)

    monkeypatch.setattr(rag.sources, "_read_file", deleted_first)
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"] and result.errors == []


async def test_a_folder_that_cannot_be_listed_is_an_error_and_no_page_is_deleted_as_gone(tmp_path, monkeypatch):
    """os.walk passed over it in silence, and ingest deleted its pages' chunks. Permissions cannot deny
    root (as tests may run), so the listing is refused as the system would refuse it."""
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (tmp_path / "hr").mkdir()
    (tmp_path / "hr" / "leave.md").write_text("# Leave\n\n25 days.\n")
    listing = os.scandir

    def refused(folder):
        if os.fspath(folder).endswith("hr"):
            raise PermissionError(13, "Permission denied", os.fspath(folder))
        return listing(folder)

    monkeypatch.setattr(os, "scandir", refused)
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"] and result.listing_incomplete
    assert result.errors == [("hr/", "folder not read, its pages' chunks kept: PermissionError: [Errno 13] "
                                     f"Permission denied: '{tmp_path / 'hr'}'")]
    with pytest.raises(SourceError, match="knowledge directory cannot be listed: PermissionError"):
        await load_directory(tmp_path / "hr")  # the source's own folder: the whole source fails
