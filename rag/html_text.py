"""HTML to Markdown for the knowledge base: the page's main text, without navigation, header, footer
and scripts, by trafilatura, written as Markdown so the chunker still sees headings, lists, code and
tables; and the page's title. Used for fetched pages and `.html` files alike (`rag.sources`).
"""

from __future__ import annotations

import functools
import logging
import re

from gateway.errors import SourceError

# trafilatura logs what it could not parse: an empty page gave 8 lines, 7 of them at ERROR level, in
# `gateway eval` and in the server's ingest log. `html_to_markdown` says what was wrong with the page
# once, as that page's error, so trafilatura's own lines are silenced.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)


def html_to_markdown(html: str, *, url: str | None = None) -> tuple[str | None, str]:
    """(title, main text as Markdown) with navigation, header, footer and scripts dropped."""
    import trafilatura

    if not html.strip():
        raise SourceError("the page is empty")
    html = _xml_safe(html)
    title = _page_title(html)
    html = _without_page_furniture(html)
    options = dict(output_format="markdown", include_tables=True, include_formatting=True, include_links=False)
    text = trafilatura.extract(html, url=url, favor_recall=True, config=_short_pages_config(), **options)
    if not text:
        # Very short pages fall under trafilatura's main-text heuristics; take the body as it is.
        text = trafilatura.html2txt(html) or ""
    if not text.strip():
        raise SourceError("no main text: the page holds only navigation, header, footer or scripts "
                         "(a page built by JavaScript has its text only in the browser)")
    return title, with_table_rules(text)


_TABLE_ROW = re.compile(r"^[ \t]*\|.*\|[ \t]*$")
_RULE_ROW = re.compile(r"^[ \t]*\|(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*$")
_CELL_BREAK = re.compile(r"(?<!\\)\|")
_HEADER_WORDS = 4  # "Largest attachment size" names a column; a longer cell is content


def with_table_rules(markdown: str) -> str:
    """`markdown` with a delimiter row (`|---|---|`) under the first row of each table that has none when
    that row names the columns (`_names_columns`). trafilatura writes one only under `<th>` cells; a table
    of `<td>`s alone (Word's, most CMSs') came out as pipes that Markdown does not read as a table, whose
    rows the chunker never read with their header ("Price: $12")."""
    lines = markdown.split("\n")
    out: list[str] = []
    in_code = False  # a `<pre>`'s ASCII table stays as it was drawn
    for i, line in enumerate(lines):
        out.append(line)
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        starts = not in_code and _TABLE_ROW.match(line) and not (i and _TABLE_ROW.match(lines[i - 1]))
        if starts and i + 1 < len(lines) and _TABLE_ROW.match(lines[i + 1]) and not _RULE_ROW.match(lines[i + 1]):
            end = i + 1
            while end < len(lines) and _TABLE_ROW.match(lines[end]):
                end += 1
            first, *body = ([cell.strip() for cell in _CELL_BREAK.split(row.strip().strip("|"))] for row in lines[i:end])
            if _names_columns(first, body):
                out.append("|" + "---|" * len(first))
    return "\n".join(out)


def _names_columns(first: list[str], body: list[list[str]]) -> bool:
    """Whether a table's first row is its header: its cells all bold (Word's and editors' header row), or
    short labels without figures over a column of figures ("Price" over "$12", "$20"). Any first row taken
    so misread tables whose first row is data ("Monday | 9-17": "Monday: Tuesday; 9-17: 9-18", which the
    offline responder quoted) and layout tables (a page's paragraphs in cells, joined by colons into one
    sentence); without that evidence its rows stay cells alone, as before. A table of two columns whose
    first column is a label in every row is a key/value table ("Colour | Red", "Weight | 2 kg"), whose first
    row is no header though figures stand under it ("Colour: Weight; Red: 2 kg"): only bold cells tell one there."""
    cells = [cell for cell in first if cell]
    if not cells:
        return False
    if all(len(cell) > 4 and cell.startswith("**") and cell.endswith("**") for cell in cells):
        return True
    if not all(map(_is_label, cells)):
        return False
    if len(first) == 2 and all(row and _is_label(row[0]) for row in [first, *body]):
        return False
    return any(name and all(column < len(row) and re.search(r"\d", row[column]) for row in body)
               for column, name in enumerate(first))


def _is_label(cell: str) -> bool:
    """Whether a cell reads as a name (of a column, or of a row's value): a few words, no figures, no sentence."""
    return bool(cell) and len(cell.split()) <= _HEADER_WORDS and not re.search(r"\d", cell) and cell[-1] not in ".!?"


def _page_title(html: str) -> str | None:
    """The title `trafilatura.extract_metadata` gives (meta tags, then JSON-LD, then `<title>` or
    `<h1>`), without the rest of that call: its date search ran dateparser over every locale and
    took 88 ms a page on average, 1.4 s on a page of date-like strings, for a date nobody reads."""
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.utils import load_html

    tree = load_html(html)
    if tree is None:
        return None
    try:
        meta = extract_meta_json(tree, examine_meta(tree))
    except Exception:  # trafilatura guards its JSON-LD reader the same way: a bad block is not the page's fault
        meta = examine_meta(tree)
    return meta.title or extract_title(tree) or None


# Never a page's main text. A header or footer inside <article> or <main>, or holding the <h1>, is
# the content's own (its title, its byline) and stays.
_FURNITURE = ("//nav | //aside | //script | //style | //noscript | //template"
              " | //header[not(ancestor::article or ancestor::main or .//h1)]"
              " | //footer[not(ancestor::article or ancestor::main)]")


def _without_page_furniture(html: str) -> str:
    """`html` without navigation, sidebars, scripts, `<noscript>` notices and the site's header and
    footer. trafilatura keeps them when nothing else is on the page: a page of links only was indexed
    as "Home About Contact", and a JavaScript app as its "Please enable JavaScript"."""
    from lxml import etree
    from lxml import html as lxml_html

    try:
        tree = lxml_html.document_fromstring(html)
    except (etree.ParserError, ValueError):  # empty or unparseable: trafilatura says what it can
        return html
    for element in tree.xpath(_FURNITURE):
        element.drop_tree()  # keeps the text that follows the element
    for cell in tree.xpath("//thead//td"):  # a header row by markup: trafilatura writes a header only of <th>s
        cell.tag = "th"
    return lxml_html.tostring(tree, encoding="unicode")


_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHARACTER_REF = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,8})|([0-9]{1,10}));")


def _xml_safe(html: str) -> str:
    """`html` without the characters XML cannot hold: control characters, raw or as `&#14;`, and
    surrogates written as references (decoded text holds no raw ones). lxml refuses them inside trafilatura with a ValueError, and the whole page was
    skipped: one XSS sample on a security page lost all of its text."""
    def keep(match: re.Match[str]) -> str:
        code = int(match.group(1), 16) if match.group(1) else int(match.group(2))
        unsafe = (code < 0x20 and code not in (0x9, 0xA, 0xD)) or code == 0x7F or 0xD800 <= code <= 0xDFFF
        return "" if unsafe or code > 0x10FFFF else match.group()

    return _CHARACTER_REF.sub(keep, _CONTROL_CHARS.sub("", html))


@functools.cache
def _short_pages_config():
    """trafilatura's settings with its minimum sizes at 1. Under its defaults a short page (opening
    hours, a contact page: typical support content) is below the minimum, and trafilatura falls
    back to the whole body: header and navigation text kept, headings lost."""
    from trafilatura.settings import use_config

    config = use_config()
    for key in ("MIN_EXTRACTED_SIZE", "MIN_OUTPUT_SIZE", "MIN_EXTRACTED_COMM_SIZE", "MIN_OUTPUT_COMM_SIZE"):
        config.set("DEFAULT", key, "1")
    return config
