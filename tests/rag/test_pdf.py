"""PDF structure: headings from font sizes, paragraphs from line gaps, running headers dropped, and the
chunker then splitting a PDF at its headings."""

from __future__ import annotations

from rag.chunking import chunk_document
from rag.pdf import pdf_markdown
from rag.sources import load_directory
from tests.rag.pdfs import build_pdf, text_at

MANUAL_PAGE = " ".join([
    text_at("Getting started", size=20, y=740),
    text_at("Plug in the charger and wait until the light turns green.", size=11, y=710),
    text_at("Then hold the power key for three seconds.", size=11, y=696),
    text_at("# is the key that opens the menu.", size=11, y=660),  # a new paragraph, not a heading
    text_at("Battery care and", size=14, y=620, scaled=True),
    text_at("storage", size=14, y=604, scaled=True),  # the same heading, wrapped
    text_at("Keep the battery between 10 and 35 degrees.", size=11, y=580),
])


def test_headings_come_from_font_sizes_and_paragraphs_from_gaps():
    _, markdown = pdf_markdown(build_pdf([MANUAL_PAGE]))
    assert markdown.split("\n\n") == [
        "# Getting started",
        "Plug in the charger and wait until the light turns green.\nThen hold the power key for three seconds.",
        "\\# is the key that opens the menu.",
        "## Battery care and storage",
        "Keep the battery between 10 and 35 degrees.",
    ]


def test_bold_lines_at_body_size_are_headings_below_the_sized_ones():
    page = " ".join([
        text_at("Privacy policy", size=18, y=740),
        text_at("Data we keep", size=11, y=710, bold=True),
        text_at("We keep your notes, your email address and the devices you sign in on.", size=11, y=696),
        text_at("Important: we never sell them.", size=11, y=660, bold=True),  # ends like a sentence: text
        text_at("How long we keep it", size=11, y=620, bold=True),
        text_at("Until you delete your account, and backups for thirty days after that.", size=11, y=606),
    ])
    _, markdown = pdf_markdown(build_pdf([page]))
    assert markdown.split("\n\n") == [
        "# Privacy policy",
        "## Data we keep",
        "We keep your notes, your email address and the devices you sign in on.",
        "Important: we never sell them.",
        "## How long we keep it",
        "Until you delete your account, and backups for thirty days after that.",
    ]


def test_bold_marks_nothing_where_most_text_is_bold():
    lines = ["Terms", "These terms apply to every plan.", "Fees", "Fees are due monthly."]
    page = " ".join(text_at(text, size=11, y=700 - 30 * i, bold=True) for i, text in enumerate(lines))
    _, markdown = pdf_markdown(build_pdf([page]))
    assert "#" not in markdown and markdown.split("\n\n") == lines


def test_a_pdf_in_one_size_is_paragraphs_without_headings():
    page = " ".join([text_at("Warranty", size=11, y=700), text_at("It covers two years.", size=11, y=686),
                     text_at("Repairs are free.", size=11, y=650),
                     text_at("~~~ marks a code sample in the editor.", size=11, y=636)])  # text, not a fence
    _, markdown = pdf_markdown(build_pdf([page]))
    assert markdown == "Warranty\nIt covers two years.\n\nRepairs are free.\n\\~~~ marks a code sample in the editor."


def test_running_headers_page_numbers_and_contents_entries():
    pages = []
    for number in range(1, 5):
        lines = [text_at("Acme Router Manual", size=9, y=770)]  # running header, body-size-ish
        if number == 1:
            lines += [text_at("Acme Router Manual", size=24, y=720),  # the real title: kept
                      text_at("Contents . . . . . . . . 2", size=14, y=690)]
        lines += [text_at(f"Section {number}", size=16, y=650),
                  text_at(f"Body text of section {number} explains one feature in detail.", size=10, y=620),
                  text_at("Acme confidential", size=10, y=55, bold=True),  # a bold running footer: dropped too
                  text_at(f"Page {number}", size=9, y=40)]  # running footer, its number changing
        pages.append(" ".join(lines))
    _, markdown = pdf_markdown(build_pdf(pages))
    blocks = markdown.split("\n\n")
    assert blocks[0] == "# Acme Router Manual"
    assert "Contents . . . . . . . . 2" in blocks  # large, but a contents entry: text
    assert [b for b in blocks if b.startswith("#")] == ["# Acme Router Manual"] + [f"## Section {n}" for n in range(1, 5)]
    assert not any("Page " in b or "confidential" in b for b in blocks) and blocks.count("Acme Router Manual") == 0


async def test_a_pdf_is_chunked_at_its_headings(tmp_path, dense):
    (tmp_path / "manual.pdf").write_bytes(build_pdf([MANUAL_PAGE]))
    document = (await load_directory(tmp_path)).documents[0]
    chunks = chunk_document(document.text, fmt=document.format, title=document.title, bot="b", source="s",
                            doc_id=document.doc_id, count_tokens=dense.count_tokens)
    paths = [c.heading_path for c in chunks]
    assert paths == [("Getting started",), ("Getting started", "Battery care and storage")]
    assert "10 and 35 degrees" in chunks[1].text and "charger" in chunks[0].text


async def test_a_scanned_pdf_without_text_is_recorded_as_an_error_not_skipped(tmp_path):
    (tmp_path / "scan.pdf").write_bytes(build_pdf(["0 0 1 rg 72 72 200 200 re f", "0 0 1 rg 10 10 50 50 re f"]))
    (tmp_path / "notes.md").write_text("# Notes\n\nStill loaded.")
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["notes.md"]
    [(doc_id, error)] = result.errors
    assert doc_id == "scan.pdf" and error.startswith("PdfWithoutText: no text on its 2 page(s)")


async def test_a_pdf_without_a_title_of_its_own_is_titled_by_its_first_heading(tmp_path):
    """As a Markdown file is; the file name ("manual") was the citation's title before."""
    (tmp_path / "manual.pdf").write_bytes(build_pdf([MANUAL_PAGE]))
    (tmp_path / "plain.pdf").write_bytes(build_pdf([text_at("Only a paragraph, no heading.", size=11, y=700)]))
    documents = {d.doc_id: d for d in (await load_directory(tmp_path)).documents}
    assert documents["manual.pdf"].title == "Getting started"
    assert documents["plain.pdf"].title == "plain"


def test_a_word_broken_across_lines_is_joined_as_the_document_writes_it():
    page = " ".join([
        text_at("Settings", size=20, y=740),
        text_at("Open the configu-", size=11, y=710),
        text_at("ration page, then the self-", size=11, y=696),
        text_at("service portal. Every self-service action is logged; the data-", size=11, y=682),
        text_at("base keeps it for a year. See pages 3-", size=11, y=668),
        text_at("4 of the database guide.", size=11, y=654),
    ])
    _, markdown = pdf_markdown(build_pdf([page]))
    assert markdown.split("\n\n")[1] == (
        "Open the configuration page, then the self-service portal. Every self-service action is logged; the "
        "database keeps it for a year. See pages 3-\n4 of the database guide.")


def test_ligatures_and_soft_hyphens_read_as_letters():
    from rag.pdf import _Line, mend_broken_words

    line = _Line(parts=["the \ufb01le and the of\ufb01ce"])
    assert line.text == "the file and the office"
    assert mend_broken_words("an interopera\u00ad\nbility test, and a hy\u00adphen that breaks nothing") == (
        "an interoperability test, and a hyphen that breaks nothing")


async def test_a_pdf_with_only_a_permissions_password_loads(tmp_path):
    """Most PDFs restricted from copying or printing are AES-encrypted with an owner password and an
    empty user password: every reader opens them. pypdf needs `cryptography` for AES, which was not
    installed, so each such manual was the file's error ("cryptography>=3.1 is required")."""
    import io

    from pypdf import PdfReader, PdfWriter

    for algorithm in ("AES-128", "AES-256"):
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(build_pdf([MANUAL_PAGE]))))
        writer.encrypt(user_password="", owner_password="no-copying", algorithm=algorithm)
        with open(tmp_path / f"manual-{algorithm}.pdf", "wb") as out:
            writer.write(out)
    result = await load_directory(tmp_path)
    assert result.errors == []
    assert [d.title for d in result.documents] == ["Getting started", "Getting started"]
    assert all("10 and 35 degrees" in d.text for d in result.documents)


async def test_a_pdf_that_needs_a_password_to_open_is_an_error_that_says_so(tmp_path):
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(build_pdf([MANUAL_PAGE]))))
    writer.encrypt(user_password="open-sesame", owner_password="owner", algorithm="AES-128")
    with open(tmp_path / "locked.pdf", "wb") as out:
        writer.write(out)
    [(doc_id, error)] = (await load_directory(tmp_path)).errors
    assert (doc_id, error) == ("locked.pdf", "PdfNeedsPassword: it needs a password to open; save a copy without one")


async def test_an_empty_a_damaged_and_a_web_page_saved_as_pdf_each_say_which(tmp_path):
    """All three said pypdf's "PdfStreamError: Stream has ended unexpectedly" or "EmptyFileError"."""
    whole = build_pdf([text_at("Returns are free within thirty days.", size=11, y=700)])
    (tmp_path / "empty.pdf").write_bytes(b"")
    (tmp_path / "cut.pdf").write_bytes(whole[: len(whole) // 2])  # a download that stopped halfway
    (tmp_path / "page.pdf").write_bytes(b"<!DOCTYPE html>\n<html><head><title>Sign in</title>")
    errors = dict((await load_directory(tmp_path)).errors)
    assert errors["empty.pdf"] == "PdfUnreadable: the file is empty (0 bytes)"
    assert errors["cut.pdf"].startswith("PdfUnreadable: damaged PDF, cannot be read (truncated or corrupt; pypdf: ")
    assert errors["cut.pdf"].endswith("save or download it again")
    assert errors["page.pdf"] == ("PdfUnreadable: not a PDF: it begins '<!DOCTYPE html> <html><head><title>Sign in</title>' "
                                  "(a web page or another file saved under a PDF's name?)")


async def test_a_pdf_with_text_on_few_of_its_pages_is_loaded_with_a_warning_naming_them(tmp_path, caplog):
    """A scan with a typed cover page indexed its cover alone, and nothing said the rest was missing."""
    scanned = "0 0 1 rg 72 72 200 200 re f"  # an image-like page: paint, no text
    pages = [text_at("Lease agreement", size=20, y=700), scanned, scanned, scanned, text_at("Signed", size=11, y=700)]
    (tmp_path / "lease.pdf").write_bytes(build_pdf(pages))
    (tmp_path / "brochure.pdf").write_bytes(build_pdf([text_at("Our offices", size=20, y=700), scanned]))  # a photo page
    result = await load_directory(tmp_path)
    assert sorted(d.doc_id for d in result.documents) == ["brochure.pdf", "lease.pdf"]
    [warning] = [r for r in caplog.records if r.getMessage() == "source.pdf_pages_without_text"]
    assert (warning.levelname, warning.doc_id, warning.without_text, warning.pages, warning.which) == (
        "WARNING", "lease.pdf", 3, 5, "2-4")
