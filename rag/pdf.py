"""A PDF's text as Markdown, with its headings and paragraphs recovered from the layout.

pypdf's plain text is one run of lines per page: no headings, no paragraphs. The chunker splits on
both (a new chunk at every heading, which also goes into the chunk's heading path), so a manual or a
policy in PDF would be packed by size alone. pypdf reports each text run's font size and position,
and that is enough for the common case:

- the body size is the font size that carries the most characters;
- a short line set at least `HEADING_SIZE_RATIO` times larger is a heading; the largest heading size
  is `#`, the next `##`, the rest `###`; a heading wrapped over two lines is joined;
- a short line at body size set wholly in a bold face (`Helvetica-Bold`, `Arial,Bold`, `...-Black`),
  that does not end like a sentence, is a heading one level below the sized ones, as Word documents
  and policies often mark their sections; unless bold carries more than `BOLD_BODY_SHARE` of the
  text, where it marks nothing;
- a vertical gap wider than `PARAGRAPH_GAP` line heights (or a jump back up, as at a new column)
  starts a paragraph, and so does a new page;
- a running header or footer (a line among the first or last `RUNNING_LINES` of a page whose text,
  digits aside, and size recur there on at least half the pages, and at least `RUNNING_MIN_PAGES`, and
  that is not a heading set larger) is dropped:
  page numbers and a repeated title would otherwise land in every chunk;
- a table-of-contents entry (dot leaders and a page number) is text, however large;
- a line break inside a text string is one whether written LF, CRLF or CR (as `rag.decoding` makes the
  other formats' line endings LF), and the title from the PDF's metadata is one line.

A PDF set in one size and face throughout comes out as paragraphs. A PDF with pages but no text (a
scan) raises `PdfWithoutText`, so the source records it as an error and keeps the document's previous
chunks, instead of the document silently vanishing.
"""

from __future__ import annotations

import io
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field

from rag.blocks import first_heading

log = logging.getLogger(__name__)

HEADING_SIZE_RATIO = 1.15
HEADING_MAX_CHARS = 150
BOLD_HEADING_MAX_CHARS = 80
BOLD_LINE_SHARE = 0.9
BOLD_BODY_SHARE = 0.3
HEADING_LEVELS = 3
PARAGRAPH_GAP = 1.5
RUNNING_LINES = 2
RUNNING_MIN_PAGES = 3
MIN_BLANK_PAGES = 2  # pages without text, when they are most of a PDF, that make a warning
_MARKDOWN_OPENERS = ("#", "```", "~~~")
_TOC_ENTRY = re.compile(r"(\.\s*){4,}\S*\d+$")
_BOLD_FACE = re.compile(r"bold|black|heavy", re.I)
_SENTENCE_END = (".", ",", ";", ":", "!", "?")
# One glyph for two or three letters: pypdf gives "ﬁ" where the font maps it so, and "ﬁle" is then
# another word than "file" to BM25, to the encoder and to anyone searching or quoting the page.
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st"})
SOFT_HYPHEN = "\u00ad"
# A word broken at the end of a line ("configu-" / "ration"): a letter, a hyphen (or a soft one) ending
# the line, and a lower-case letter starting the next.
_BROKEN_WORD = re.compile(rf"(?<![\w-])([^\W\d_][\w]*)([-{SOFT_HYPHEN}])\n([a-z]\w*)")
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


class PdfWithoutText(ValueError):
    """A PDF whose pages hold no text layer (a scan): recorded as the file's error, not skipped silently."""


class PdfNeedsPassword(ValueError):
    """A PDF that opens only with a password: recorded as the file's error, saying so."""


class PdfUnreadable(ValueError):
    """Empty, not a PDF at all (a web page saved under a .pdf name), or damaged: the file's error, saying which."""


PDF_HEADER_WITHIN = 1024  # readers accept junk before `%PDF-` up to here (ISO 32000 implementation note)


@dataclass
class _Line:
    """One line of text as pypdf laid it out: its text, the size of most of its characters, its height."""

    sizes: Counter = field(default_factory=Counter)  # font size -> characters in it
    bold: int = 0  # characters set in a bold face
    parts: list[str] = field(default_factory=list)
    y: float | None = None
    page: int = 0

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts).split()).translate(_LIGATURES)

    @property
    def size(self) -> float:
        return self.sizes.most_common(1)[0][0] if self.sizes else 0.0

    @property
    def chars(self) -> int:
        return sum(self.sizes.values())

    @property
    def is_bold(self) -> bool:
        return self.bold >= BOLD_LINE_SHARE * max(1, self.chars)


def pdf_text(data: bytes, *, name: str | None = None) -> tuple[str | None, str]:
    """(title, text as Markdown) of a PDF: the title is the PDF's own, else its first level-1 heading, as
    for a Markdown file. `name` (its path or URL) is what a warning about it names."""
    title, text = pdf_markdown(data, name=name)
    return title or first_heading(text), text


def pdf_markdown(data: bytes, *, name: str | None = None) -> tuple[str | None, str]:
    """(title from the PDF's metadata, the text as Markdown)."""
    from pypdf.errors import PyPdfError

    if not data or data.isspace():  # (strip() copied the whole file, up to the size cap)
        raise PdfUnreadable("the file is empty (0 bytes)" if not data else "the file holds only white space")
    if b"%PDF-" not in data[:PDF_HEADER_WITHIN]:
        # pypdf said "Stream has ended unexpectedly" for an HTML error page saved as a .pdf.
        opening = " ".join(data[:60].decode("latin-1").split())
        raise PdfUnreadable(f"not a PDF: it begins {opening!r} (a web page or another file saved under a PDF's name?)")
    try:
        return _pdf_markdown(data, name)
    except PyPdfError as exc:
        raise PdfUnreadable(f"damaged PDF, cannot be read (truncated or corrupt; pypdf: {type(exc).__name__}: {exc}); "
                            "save or download it again") from exc


def _pdf_markdown(data: bytes, name: str | None) -> tuple[str | None, str]:
    from pypdf import PasswordType, PdfReader

    reader = PdfReader(io.BytesIO(data))
    # pypdf opens one with an empty user password (a permissions password only) by itself; the rest
    # failed later as "FileNotDecryptedError: File has not been decrypted".
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise PdfNeedsPassword("it needs a password to open; save a copy without one")
    pages = [[line for line in _page_lines(page, number) if line.text] for number, page in enumerate(reader.pages)]
    # One line, as a Markdown file's is: a line break in it (CRLF too) went into every chunk's heading path.
    title = " ".join(reader.metadata.title.split()) or None if reader.metadata and reader.metadata.title else None
    lines = [line for page_lines in pages for line in page_lines]
    if not lines:
        if pages:
            raise PdfWithoutText(f"no text on its {len(pages)} page(s): a scanned PDF? OCR is not supported, "
                                 "so export it with its text (or as Markdown/HTML)")
        return title, ""
    blank = [number + 1 for number, page_lines in enumerate(pages) if not page_lines]
    if len(blank) >= MIN_BLANK_PAGES and len(blank) * 2 > len(pages):
        # A scan with a typed cover page, or scanned annexes: only a few pages were indexed, without a word.
        log.warning("source.pdf_pages_without_text", extra={
            "doc_id": name, "without_text": len(blank), "pages": len(pages), "which": _page_ranges(blank),
            "effect": "only the pages with text are indexed (a scanned PDF? OCR is not supported)"})
    style = _Style(_body_size(lines), _bold_marks_headings(lines))
    return title, mend_broken_words(_markdown(_without_running_lines(pages, style), style))


def _page_ranges(numbers: list[int]) -> str:
    """`2-4,7`: sorted page numbers, runs as ranges."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def mend_broken_words(text: str) -> str:
    """Join the words that typesetting broke across lines, with the document's own words as the
    dictionary: "configu-"/"ration" is "configuration" when the document writes that, or when it never
    writes "configu" alone; "self-"/"service" stays "self-service" when the document writes that, or
    writes "self" alone. A soft hyphen is a break by definition, so its word is always joined."""
    # The broken words themselves are left out, or "configu" would count as a word the document writes.
    seen = {word.lower() for word in _WORD.findall(_BROKEN_WORD.sub(" ", text).replace(SOFT_HYPHEN, ""))}

    def mend(m: re.Match[str]) -> str:
        left, hyphen, right = m.groups()
        joined, hyphenated = left + right, f"{left}-{right}"
        if hyphen == SOFT_HYPHEN or joined.lower() in seen:
            return joined
        return hyphenated if hyphenated.lower() in seen or left.lower() in seen else joined

    return _BROKEN_WORD.sub(mend, text).replace(SOFT_HYPHEN, "")


@dataclass(frozen=True)
class _Style:
    """What marks a heading in this document: a size above the body's, and bold if bold is rare."""

    body: float
    bold_marks: bool

    def is_heading(self, line: _Line) -> bool:
        return self.is_large_heading(line) or self.is_bold_heading(line)

    def is_large_heading(self, line: _Line) -> bool:
        """A short line set at least `HEADING_SIZE_RATIO` times larger than the body."""
        return (line.size >= self.body * HEADING_SIZE_RATIO and len(line.text) <= HEADING_MAX_CHARS
                and _reads_as_heading(line))

    def is_bold_heading(self, line: _Line) -> bool:
        """A short line wholly in bold that does not end like a sentence, where bold is rare."""
        return (self.bold_marks and line.is_bold and len(line.text) <= BOLD_HEADING_MAX_CHARS
                and not line.text.endswith(_SENTENCE_END) and _reads_as_heading(line))


def _reads_as_heading(line: _Line) -> bool:
    """Has letters and is not a table-of-contents entry."""
    return any(c.isalpha() for c in line.text) and not _TOC_ENTRY.search(line.text)


def _bold_marks_headings(lines: list[_Line]) -> bool:
    """True when bold carries at most `BOLD_BODY_SHARE` of the characters (else it marks nothing)."""
    return sum(line.bold for line in lines) <= BOLD_BODY_SHARE * sum(line.chars for line in lines)


def _body_size(lines: list[_Line]) -> float:
    """The font size that carries the most characters."""
    chars: Counter = Counter()
    for line in lines:
        chars.update(line.sizes)
    return chars.most_common(1)[0][0]


def _without_running_lines(pages: list[list[_Line]], style: _Style) -> list[_Line]:
    """Every page's lines in order, less its running header and footer. A heading set larger is never
    one: a chapter title may open every page ("Section 1", "Section 2", ...); a bold line at body size
    ("Acme confidential") may be."""
    def key(line: _Line) -> tuple[str, float]:  # the size too: page 1's large title is not the running header
        return re.sub(r"\d+", "#", line.text.lower()), line.size

    def edges(lines: list[_Line]) -> list[_Line]:
        return lines[:RUNNING_LINES] + lines[RUNNING_LINES:][-RUNNING_LINES:]

    seen = Counter(k for lines in pages for k in {key(line) for line in edges(lines)})
    bar = max(RUNNING_MIN_PAGES, len(pages) / 2)
    running = {k for k, count in seen.items() if count >= bar}
    kept: list[_Line] = []
    for lines in pages:
        edge_ids = {id(line) for line in edges(lines)}
        kept += [line for line in lines if id(line) not in edge_ids or key(line) not in running
                 or style.is_large_heading(line)]
    return kept


def _page_lines(page, number: int) -> list[_Line]:
    """The page's lines, from pypdf's text runs (a run may end a line, or hold several)."""
    lines = [_Line(page=number)]

    def visit(text: str, cm: list[float], tm: list[float], font: object, font_size: float) -> None:
        # The size a reader sees: the font size scaled by the text and page matrices (many producers
        # set `1 Tf` and scale with the matrix).
        scale = math.sqrt(abs(tm[0] * tm[3] - tm[1] * tm[2])) * math.sqrt(abs(cm[0] * cm[3] - cm[1] * cm[2]))
        size = round(font_size * scale * 2) / 2
        bold = bool(_BOLD_FACE.search(str(font.get("/BaseFont", "")) if hasattr(font, "get") else ""))
        # A string's line breaks come as written (CRLF, or old Mac's CR): a lone CR ran two lines into one.
        for i, piece in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")):
            if i:
                lines.append(_Line(page=number))
            if piece.strip():
                line = lines[-1]
                line.parts.append(piece)
                line.sizes[size] += len(piece.strip())
                if bold:
                    line.bold += len(piece.strip())
                if line.y is None:
                    line.y = tm[5] * cm[3] + cm[5]

    page.extract_text(visitor_text=visit)
    return lines


def _markdown(lines: list[_Line], style: _Style) -> str:
    """Headings by size (and bold), paragraphs by gaps (see the module docstring)."""
    heading_sizes = sorted({line.size for line in lines if style.is_large_heading(line)}, reverse=True)
    level_of = {size: min(i + 1, HEADING_LEVELS) for i, size in enumerate(heading_sizes)}
    bold_level = min(len(heading_sizes) + 1, HEADING_LEVELS)

    blocks: list[str] = []
    paragraph: list[str] = []
    previous: _Line | None = None
    for line in lines:
        heading = style.is_heading(line)
        if heading and previous is not None and style.is_heading(previous) and previous.size == line.size \
                and _close(previous, line):
            blocks[-1] += " " + line.text  # a heading wrapped over two lines (the last block is its start)
        elif heading:
            _flush(paragraph, blocks)
            level = level_of[line.size] if style.is_large_heading(line) else bold_level
            blocks.append("#" * level + " " + line.text)
        else:
            if previous is not None and (previous.page != line.page or not _close(previous, line)):
                _flush(paragraph, blocks)
            # A body line that begins like a Markdown heading or code fence stays text.
            paragraph.append("\\" + line.text if line.text.startswith(_MARKDOWN_OPENERS) else line.text)
        previous = line
    _flush(paragraph, blocks)
    return "\n\n".join(blocks)


def _close(upper: _Line, lower: _Line) -> bool:
    """True when `lower` follows `upper` within a paragraph's line spacing on the same page."""
    if upper.y is None or lower.y is None or upper.page != lower.page:
        return upper.page == lower.page
    gap = upper.y - lower.y
    return 0 < gap <= PARAGRAPH_GAP * max(upper.size, lower.size, 1.0)


def _flush(paragraph: list[str], blocks: list[str]) -> None:
    if paragraph:
        blocks.append("\n".join(paragraph))
        paragraph.clear()
