"""Line endings: a file or page saved on Windows (CRLF) or old Mac (CR) gives the chunks of its LF copy."""

from __future__ import annotations

import pytest

from rag.chunking import chunk_document
from rag.sources import load_directory, load_urls
from tests.rag.test_sources import HTML, fake_site

TEXT = "Passwords\n\nTo reset your password, open Settings,\nchoose Security and press Reset password.\n" \
       "Two-factor authentication is in the same screen.\n"
MARKDOWN = "---\ntitle: Setup guide\n---\n# Setup\n\nInstall the app,\nthen sign in.\n\n```\nsetup --all\nsetup --check\n```\n"
FILES = {"notes.txt": TEXT, "guide.md": MARKDOWN, "billing.html": HTML.replace("<p>You can", "<p>You\ncan")}


def _chunks(doc, dense):
    return [(c.chunk_id, c.text, c.heading_path, c.sentences) for c in chunk_document(
        doc.text, fmt=doc.format, title=doc.title, bot="acme", source="docs", doc_id=doc.doc_id,
        count_tokens=dense.count_tokens)]


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
async def test_a_file_with_other_line_endings_gives_the_chunks_of_its_lf_copy(tmp_path, dense, newline):
    """A CRLF .txt file kept "\\r" in its chunks' text (and so in answers and citations)."""
    for folder, ending in (("lf", "\n"), ("other", newline)):
        (tmp_path / folder).mkdir()
        for name, text in FILES.items():
            (tmp_path / folder / name).write_bytes(text.replace("\n", ending).encode())
    lf = {d.doc_id: d for d in (await load_directory(tmp_path / "lf")).documents}
    other = {d.doc_id: d for d in (await load_directory(tmp_path / "other")).documents}
    assert sorted(other) == sorted(FILES)
    for doc_id, doc in other.items():
        assert "\r" not in doc.text and (doc.title, doc.text) == (lf[doc_id].title, lf[doc_id].text)
        assert _chunks(doc, dense) == _chunks(lf[doc_id], dense)  # the same chunk ids as the LF file's


async def test_a_fetched_text_page_with_crlf_line_endings_reads_as_lf():
    client, _ = fake_site({"/notes.txt": (200, "text/plain", TEXT.replace("\n", "\r\n"))})
    async with client:
        result = await load_urls(["https://help.example/notes.txt"], client=client)
    assert [d.text for d in result.documents] == [TEXT]


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
async def test_a_pdf_whose_strings_break_lines_otherwise_gives_the_chunks_of_its_lf_copy(tmp_path, dense, newline):
    """pypdf passes a text string's line breaks on as written: a lone CR was read as a space, so the lines it
    broke ran together ("Install the app, then sign in." one line, where the LF copy keeps two), and a title from
    the PDF's metadata kept its CR in every chunk's heading path, answer and citation."""
    import io

    from pypdf import PdfReader, PdfWriter

    from tests.rag.pdfs import build_pdf, text_at

    page = " ".join([text_at("Setup", size=20, y=740), text_at("Install the app,\\nthen sign in.", size=11, y=710),
                     text_at("Call support\\nif it fails.", size=11, y=670)])
    for folder, ending in (("lf", "\\n"), ("other", newline.replace("\r", "\\r").replace("\n", "\\n"))):
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(build_pdf([page.replace("\\n", ending)]))))
        writer.add_metadata({"/Title": "Setup guide\nfor admins".replace("\n", newline if folder == "other" else "\n")})
        (tmp_path / folder).mkdir()
        with open(tmp_path / folder / "setup.pdf", "wb") as out:
            writer.write(out)
    [lf] = (await load_directory(tmp_path / "lf")).documents
    [other] = (await load_directory(tmp_path / "other")).documents
    assert "\r" not in other.text and "\r" not in other.title
    assert (other.title, other.text) == (lf.title, lf.text)
    assert lf.title == "Setup guide for admins"  # a title is one line, as a Markdown file's
    assert "Install the app, then sign in." not in other.text  # two lines, not run into one
    assert _chunks(other, dense) == _chunks(lf, dense)
