"""Source loaders on hostile input: one bad page, child sitemap or file never fails the whole source,
text in any common encoding decodes, binary content is refused, and robots.txt follows RFC 9309."""

from __future__ import annotations

import codecs
import logging
from pathlib import Path

import httpx
import pytest

from rag.chunking import chunk_document
from rag.decoding import decode_text
from rag.sources import SourceError, load_directory, load_sitemap, load_urls
from tests.rag.pdfs import tiny_pdf

SITE = "https://help.example"
PAGE = "<html><head><title>{0}</title></head><body><h1>{0}</h1><p>Plenty of text about {0}.</p></body></html>"


def fake_site(pages: dict[str, tuple[int, str, bytes | str] | Exception], *, timeout: float = 5.0):
    """A client whose transport serves `pages` (path -> status, content type, body) or raises the
    exception given for a path, and logs the paths requested. Bodies may be bytes, in any encoding."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        page = pages.get(request.url.path, (404, "text/plain", "not found"))
        if isinstance(page, Exception):
            raise type(page)(str(page), request=request)
        status, kind, body = page
        content = body if isinstance(body, bytes) else body.encode("utf-8")
        return httpx.Response(status, headers={"content-type": kind}, content=content)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=timeout), seen


def urlset(*paths: str) -> str:
    urls = "".join(f"<url><loc>{SITE}{p}</loc></url>" for p in paths)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'


# -- finding 1: one bad page --------------------------------------------------------------------


async def test_broken_pdf_and_malformed_url_are_recorded_and_the_good_pages_load():
    client, _ = fake_site({
        "/a.html": (200, "text/html", PAGE.format("Seals")),
        "/good.pdf": (200, "application/pdf", tiny_pdf("Walruses sleep on ice floes")),
        "/broken.pdf": (200, "application/pdf", b"%PDF-1.4\nthis is not really a pdf at all"),
    })
    bad_url = "http://[::1:bad/x.html"
    async with client:
        result = await load_urls([f"{SITE}/a.html", bad_url, f"{SITE}/good.pdf", f"{SITE}/broken.pdf"], client=client)
    assert sorted(d.doc_id for d in result.documents) == [f"{SITE}/a.html", f"{SITE}/good.pdf"]
    errors = dict(result.errors)
    assert set(errors) == {bad_url, f"{SITE}/broken.pdf"}
    assert errors[bad_url].startswith("InvalidURL:")
    assert errors[f"{SITE}/broken.pdf"].startswith("Pdf")  # PdfStreamError or PdfReadError, with pypdf's reason


async def test_a_pdf_served_as_octet_stream_is_read_and_a_pdf_url_answering_html_says_so():
    client, _ = fake_site({"/files/41/download": (200, "application/octet-stream", tiny_pdf("Walruses sleep on ice")),
                           "/manual.pdf": (200, "text/html", "<!DOCTYPE html><html><body>Please sign in</body></html>")})
    async with client:
        result = await load_urls([f"{SITE}/files/41/download", f"{SITE}/manual.pdf"], client=client)
    assert [(d.format, d.text) for d in result.documents] == [("pdf", "Walruses sleep on ice")]
    assert dict(result.errors)[f"{SITE}/manual.pdf"].startswith("PdfUnreadable: not a PDF: it begins '<!DOCTYPE html>")


async def test_a_timeout_says_which_limit_it_hit(caplog):
    client, _ = fake_site({"/slow": httpx.ReadTimeout(""), "/ok": (200, "text/plain", "fine")}, timeout=10.0)
    async with client:
        result = await load_urls([f"{SITE}/slow", f"{SITE}/ok"], client=client)
    assert result.errors == [(f"{SITE}/slow", "ReadTimeout after 10s")]
    # The log line names the URL and the reason.
    assert [(r.url, r.error) for r in caplog.records if r.getMessage() == "source.url_failed"] == [
        (f"{SITE}/slow", "ReadTimeout after 10s")]


async def test_a_failing_child_sitemap_is_recorded_and_the_healthy_ones_load():
    index = f"""<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <sitemap><loc>{SITE}/sm1.xml</loc></sitemap><sitemap><loc>{SITE}/gone.xml</loc></sitemap>
      <sitemap><loc>{SITE}/junk.xml</loc></sitemap></sitemapindex>"""
    client, _ = fake_site({
        "/sitemap.xml": (200, "application/xml", index),
        "/sm1.xml": (200, "application/xml", urlset("/a.html", "/missing.html")),
        "/junk.xml": (200, "application/xml", "<urlset><url>"),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
    })
    async with client:
        result = await load_sitemap(f"{SITE}/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == [f"{SITE}/a.html"]
    errors = dict(result.errors)
    assert set(errors) == {f"{SITE}/gone.xml", f"{SITE}/junk.xml", f"{SITE}/missing.html"}
    # Each is shown after its URL: the message does not say the URL again (a child sitemap's said it thrice).
    assert errors[f"{SITE}/gone.xml"] == "sitemap could not be fetched: answered 404 Not Found"
    assert errors[f"{SITE}/missing.html"] == "answered 404 Not Found"
    assert errors[f"{SITE}/junk.xml"].startswith("sitemap is not valid XML")


async def test_a_page_listed_with_and_without_a_fragment_is_fetched_and_stored_once():
    client, seen = fake_site({
        "/sitemap.xml": (200, "application/xml", urlset("/a.html", "/a.html#pricing", "/b.html#top")),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
        "/b.html": (200, "text/html", PAGE.format("Otters")),
    })
    async with client:
        result = await load_sitemap(f"{SITE}/sitemap.xml", client=client)
    # The first form listed names the document: a configured anchor stays in the citation's link.
    assert sorted(d.doc_id for d in result.documents) == [f"{SITE}/a.html", f"{SITE}/b.html#top"]
    assert seen.count("/a.html") == 1


async def test_a_sitemap_index_that_lists_itself_reads_each_sitemap_once():
    index = f"""<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <sitemap><loc>{SITE}/sitemap.xml</loc></sitemap><sitemap><loc>{SITE}/missing.xml</loc></sitemap>
      <sitemap><loc>{SITE}/sm1.xml</loc></sitemap><sitemap><loc>{SITE}/sm1.xml</loc></sitemap></sitemapindex>"""
    client, seen = fake_site({
        "/sitemap.xml": (200, "application/xml", index),
        "/sm1.xml": (200, "application/xml", urlset("/a.html")),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
    })
    async with client:
        result = await load_sitemap(f"{SITE}/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == [f"{SITE}/a.html"]
    assert [url for url, _ in result.errors] == [f"{SITE}/missing.xml"]  # once, not once per reading of the index
    assert seen.count("/sitemap.xml") == 1 and seen.count("/sm1.xml") == 1


async def test_a_plain_text_sitemap_lists_one_url_a_line():
    client, _ = fake_site({
        "/sitemap.txt": (200, "text/plain", f"{SITE}/a.html\r\n\r\n{SITE}/b.html\n"),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
        "/b.html": (200, "text/html", PAGE.format("Otters")),
    })
    async with client:
        result = await load_sitemap(f"{SITE}/sitemap.txt", client=client)
    assert sorted(d.doc_id for d in result.documents) == [f"{SITE}/a.html", f"{SITE}/b.html"]
    assert result.errors == []


# -- finding 6: encodings -----------------------------------------------------------------------


async def test_a_utf8_bom_is_dropped_and_the_heading_kept(tmp_path):
    (tmp_path / "bom.md").write_bytes(b"\xef\xbb\xbf# BOM heading\n\nText after a byte order mark.\n")
    [doc] = (await load_directory(tmp_path)).documents
    assert doc.title == "BOM heading" and doc.text.startswith("# BOM heading")


async def test_legacy_encoded_files_decode(tmp_path):
    (tmp_path / "latin1.md").write_bytes("# Café menu\n\nOur café serves crème brûlée.\n".encode("latin-1"))
    (tmp_path / "cp1252.txt").write_bytes("Windows-1252 “smart quotes” and € euro sign.".encode("cp1252"))
    (tmp_path / "ru.txt").write_bytes("Привет! Это тестовый документ о тюленях и моржах на льду.".encode("cp1251"))
    (tmp_path / "page.html").write_bytes(
        '<html><head><meta charset="iso-8859-1"></head><body><h1>Café menu</h1></body></html>'.encode("latin-1"))
    result = await load_directory(tmp_path)
    docs = {d.doc_id: d for d in result.documents}
    assert docs["latin1.md"].title == "Café menu" and "crème brûlée" in docs["latin1.md"].text
    assert docs["cp1252.txt"].text == "Windows-1252 “smart quotes” and € euro sign."
    assert docs["ru.txt"].text.startswith("Привет! Это тестовый документ")
    assert "Café menu" in docs["page.html"].text
    assert result.errors == []


async def test_binary_and_unmarked_utf16_files_are_refused_with_a_reason(tmp_path):
    (tmp_path / "ok.md").write_text("# Fine\n\ntext")
    (tmp_path / "utf16.md").write_bytes("# UTF16 notes\n\nAbout seals.".encode("utf-16-le"))  # no BOM
    (tmp_path / "junk.md").write_bytes(bytes(range(1, 256)) * 8)  # no NUL byte, still binary
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["ok.md"]
    errors = dict(result.errors)
    assert set(errors) == {"utf16.md", "junk.md"}
    assert "NUL bytes" in errors["utf16.md"] and "not text" in errors["junk.md"]


async def test_utf16_and_utf32_files_with_a_bom_decode(tmp_path):
    """Windows Notepad saves "Unicode" text as UTF-16 LE with a BOM."""
    text = "# Seal notes\n\nSeals haul out on the ice; the café is closed.\n"
    for name, charset in (("le.md", "utf-16"), ("be.txt", "utf-16-be"), ("wide.md", "utf-32")):
        data = text.encode(charset)
        if charset == "utf-16-be":
            data = codecs.BOM_UTF16_BE + data
        (tmp_path / name).write_bytes(data)
    result = await load_directory(tmp_path)
    assert result.errors == []
    assert {d.doc_id: d.text for d in result.documents} == dict.fromkeys(["be.txt", "le.md", "wide.md"], text)
    assert decode_text("Hi".encode("utf-16-le"), declared="utf-16le") == "Hi"  # declared by a Content-Type



async def test_pages_decode_by_meta_charset_or_content_type_or_fallback():
    client, _ = fake_site({
        "/meta.html": (200, "text/html", '<html><head><meta charset="iso-8859-1"><title>Café menu</title></head>'
                       "<body><h1>Café menu</h1><p>Our café serves crème brûlée.</p></body></html>".encode("latin-1")),
        "/header.txt": (200, "text/plain; charset=windows-1252", "Smart “quotes” cost 5 €.".encode("cp1252")),
        "/bare.txt": (200, "text/plain", "Grüße aus München.".encode("cp1252")),
        "/bom.md": (200, "text/markdown", "\ufeff# Título\n\nTexto.".encode("utf-8")),
        "/blob.md": (200, "text/markdown", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
    })
    async with client:
        result = await load_urls([f"{SITE}/meta.html", f"{SITE}/header.txt", f"{SITE}/bare.txt", f"{SITE}/bom.md",
                                  f"{SITE}/blob.md"], client=client)
    docs = {d.doc_id.removeprefix(SITE): d for d in result.documents}
    assert docs["/meta.html"].title == "Café menu" and "crème brûlée" in docs["/meta.html"].text
    assert docs["/header.txt"].text == "Smart “quotes” cost 5 €."
    assert docs["/bare.txt"].text == "Grüße aus München."
    assert docs["/bom.md"].title == "Título"
    assert [(u.removeprefix(SITE), "not text" in m) for u, m in result.errors] == [("/blob.md", True)]


async def test_a_page_labelled_latin1_reads_as_windows_1252():
    # Browsers do the same: pages labelled ISO-8859-1 are nearly always windows-1252 (curly quotes, €).
    client, _ = fake_site({"/p.txt": (200, "text/plain; charset=ISO-8859-1", "“5 €”".encode("cp1252"))})
    async with client:
        result = await load_urls([f"{SITE}/p.txt"], client=client)
    assert result.documents[0].text == "“5 €”"


# -- finding 14: robots.txt ---------------------------------------------------------------------


@pytest.mark.parametrize("robots", [(503, "text/plain", "User-agent: *\nDisallow:\n"), httpx.ConnectError("refused")])
async def test_robots_txt_server_error_or_no_answer_means_disallow_all(robots):
    client, seen = fake_site({
        "/robots.txt": robots,
        "/sitemap.xml": (200, "application/xml", urlset("/a.html")),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
    })
    async with client:
        with pytest.raises(SourceError, match="robots.txt .*disallow all"):
            await load_sitemap(f"{SITE}/sitemap.xml", client=client)
    assert seen == ["/robots.txt"]  # neither the sitemap nor any page was fetched


@pytest.mark.parametrize("status", [401, 403])
async def test_robots_txt_client_error_means_allow_all(status):
    client, seen = fake_site({
        "/robots.txt": (status, "text/plain", "User-agent: *\nDisallow: /\n"),
        "/sitemap.xml": (200, "application/xml", urlset("/a.html")),
        "/a.html": (200, "text/html", PAGE.format("Seals")),
    })
    async with client:
        result = await load_sitemap(f"{SITE}/sitemap.xml", client=client)
    assert [d.doc_id for d in result.documents] == [f"{SITE}/a.html"]


async def test_a_markdown_title_is_its_first_real_heading(tmp_path):
    """A `# comment` in a code fence and a `#hashtag` line are not headings (they became the title)."""
    (tmp_path / "setup.md").write_text("#setup\n\n```bash\n# install first\npip install x\n```\n\n# Setting up\n\nText.\n")
    (tmp_path / "plain.md").write_text("Reset the password\n==================\n\nOpen Settings.\n")
    result = await load_directory(tmp_path)
    assert {d.doc_id: d.title for d in result.documents} == {"setup.md": "Setting up", "plain.md": "Reset the password"}


async def test_front_matter_gives_the_title_and_is_not_indexed(tmp_path):
    (tmp_path / "reset.md").write_text('---\ntitle: "Reset your password"\nsidebar_position: 2\n---\n\nOpen Settings.\n')
    [doc] = (await load_directory(tmp_path)).documents
    assert doc.title == "Reset your password" and "sidebar_position" not in doc.text


async def test_front_matter_saved_with_crlf_line_endings_is_stripped_too(tmp_path):
    (tmp_path / "reset.md").write_bytes(b"---\r\ntitle: Reset your password\r\nsidebar_position: 2\r\n---\r\n\r\n"
                                        b"## Steps\r\n\r\nOpen Settings.\r\n")
    [doc] = (await load_directory(tmp_path)).documents
    assert doc.title == "Reset your password" and "sidebar_position" not in doc.text


async def test_a_document_without_a_level_one_heading_is_titled_by_its_file_name(tmp_path, dense):
    # Its first `##` used to be the title, so every heading path began "Install > Install".
    (tmp_path / "setup-guide.md").write_text("## Install\n\nRun the installer.\n\n## Configure\n\nEdit acme.toml.\n")
    [doc] = (await load_directory(tmp_path)).documents
    assert doc.title == "setup guide"
    chunks = chunk_document(doc.text, fmt=doc.format, title=doc.title, bot="b", source="s", doc_id=doc.doc_id,
                            count_tokens=dense.count_tokens)
    assert [c.heading_path for c in chunks] == [("setup guide", "Install"), ("setup guide", "Configure")]


async def test_an_html_page_with_control_characters_keeps_its_text(tmp_path):
    # `&#14;` (an XSS sample from the naughty strings) made lxml refuse the page inside trafilatura.
    (tmp_path / "security.html").write_text(
        "<html><head><title>Security</title></head><body><h1>Filtering input</h1>"
        "<p>Block script URLs before they reach the router page.</p>"
        "<p><IMG SRC=\" &#14;  javascript:alert('XSS');\"> and a raw \x0b control.</p></body></html>")
    result = await load_directory(tmp_path)
    assert result.errors == []
    [doc] = result.documents
    assert "Block script URLs before they reach the router page." in doc.text


async def test_an_html_page_without_main_text_is_an_error_not_its_navigation(tmp_path):
    (tmp_path / "links.html").write_text("<html><body><nav><a href='/'>Home</a> <a href='/about'>About</a></nav>"
                                         "<footer>Imprint</footer></body></html>")
    (tmp_path / "app.html").write_text("<html><body><noscript>You need to enable JavaScript to run this app."
                                       "</noscript><div id='root'></div><script src='app.js'></script></body></html>")
    (tmp_path / "faq.html").write_text("<html><body><header><h1>FAQ</h1></header><div>Refunds take five days."
                                       "</div><footer>Imprint</footer></body></html>")
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.html"]
    assert "Refunds take five days." in result.documents[0].text and "Imprint" not in result.documents[0].text
    assert sorted(f for f, _ in result.errors) == ["app.html", "links.html"]
    assert all("no main text" in message for _, message in result.errors)


async def test_an_empty_html_page_is_said_to_be_empty_and_trafilatura_logs_nothing(tmp_path, caplog):
    # An empty page used to print 8 lines of trafilatura's own (7 at ERROR level), then "no main text: the
    # page holds only navigation…", which it does not.
    (tmp_path / "empty.html").write_text("")
    (tmp_path / "blank.html").write_text(" \n\t")
    (tmp_path / "comment.html").write_text("<!-- a template left empty -->")  # trafilatura logged 7 lines on it
    with caplog.at_level(logging.DEBUG):  # every logger's records, trafilatura's at the level rag sets
        result = await load_directory(tmp_path)
    errors = dict(result.errors)
    assert errors.pop("blank.html") == errors.pop("empty.html") == "the page is empty"  # ours: no "ValueError:" before it
    assert list(errors) == ["comment.html"] and "no main text" in errors["comment.html"]
    assert not [r for r in caplog.records if r.name.startswith("trafilatura") and r.levelno >= logging.WARNING]


async def test_a_symlinked_folder_is_read_once_even_with_a_link_back_up(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "linked").symlink_to(shared, target_is_directory=True)
    (shared / "loop").symlink_to(kb, target_is_directory=True)  # a link back up must not loop
    ids = sorted(d.doc_id for d in (await load_directory(kb, follow_symlinks_outside=True)).documents)
    assert ids == ["linked/faq.md"]


async def test_a_broken_symlink_to_a_page_is_an_error_not_silence(tmp_path):
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (tmp_path / "moved.md").symlink_to(tmp_path / "elsewhere" / "moved.md")
    (tmp_path / "logo.png").symlink_to(tmp_path / "nowhere.png")  # not a page type: no error for it
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"]
    assert result.errors == [("moved.md", f"broken symlink: its target {tmp_path / 'elsewhere' / 'moved.md'} does not exist")]


async def test_a_link_to_a_folder_inside_the_tree_does_not_take_its_place(tmp_path):
    """With `sub/` and `alias -> sub`, the walk met `alias` first and stored `alias/x.md`."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.md").write_text("# X\n\nText.\n")
    (tmp_path / "alias").symlink_to(tmp_path / "sub", target_is_directory=True)
    (tmp_path / "sub" / "self").symlink_to(tmp_path / "sub", target_is_directory=True)
    assert [d.doc_id for d in (await load_directory(tmp_path)).documents] == ["sub/x.md"]


async def test_a_short_html_page_keeps_its_heading_and_drops_the_navigation(tmp_path):
    """Under trafilatura's minimum size the whole body came back: header and menu in, heading lost."""
    (tmp_path / "hours.html").write_text(
        "<html><head><title>Opening hours - Acme</title></head><body><header>Acme Store</header>"
        '<nav><a href="/">Home</a> | <a href="/shop">Shop</a></nav><main><h1>Opening hours</h1>'
        "<p>Mon-Fri 9-17.</p></main><footer>Imprint</footer></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    assert doc.text.strip() == "# Opening hours\n\nMon-Fri 9-17."


async def test_a_file_past_its_size_cap_is_that_files_error_and_never_read(tmp_path, monkeypatch):
    import rag.sources

    monkeypatch.setattr(rag.sources, "MAX_TEXT_FILE_BYTES", 1024 * 1024)
    (tmp_path / "faq.md").write_text("# FAQ\n\nRefunds take five days.\n")
    (tmp_path / "server.log.txt").write_text("GET /health 200\n" * 131072)  # 2 MB left in the folder
    (tmp_path / "manual.pdf").write_bytes(tiny_pdf("Charge the battery for two hours.") + b"\n%" + b"x" * 1536 * 1024)
    result = await load_directory(tmp_path)
    assert sorted(d.doc_id for d in result.documents) == ["faq.md", "manual.pdf"]  # a PDF has its own, larger cap
    assert result.errors == [("server.log.txt",
                              "2 MB, larger than the 1 MB a text file may be; not read")]


async def test_a_file_named_as_the_knowledge_directory_is_told_apart_from_a_missing_one(tmp_path):
    (tmp_path / "faq.md").write_text("# FAQ\n")
    with pytest.raises(SourceError, match="is a file, not a folder"):
        await load_directory(tmp_path / "faq.md")
    with pytest.raises(SourceError, match="knowledge directory not found") as missing:
        await load_directory(tmp_path / "nowhere")
    assert "working directory" not in str(missing.value)  # an absolute path needs no hint


async def test_a_missing_relative_directory_says_where_it_was_looked_for(tmp_path, monkeypatch):
    # Relative source paths are read from the working directory, not the config file's folder: the
    # error shows the path it tried, so "kb" run from the wrong place is found at once.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceError) as missing:
        await load_directory(Path("kb"))
    assert str(missing.value) == (f"knowledge directory not found: kb (looked for {tmp_path.resolve() / 'kb'}: "
                                  "a relative path is read from the working directory)")
