"""A document's own blocks, the units chunking packs: paragraphs, list items, code, tables, quotes.

Markdown (and HTML and PDF, which arrive as Markdown) is parsed with markdown-it-py, so a code fence
or a table is one block and is never cut by a blank line inside it; plain text is split into
paragraphs at blank lines. Each Markdown block is kept as its source lines, under the heading stack
of its section. A block's `kind` tells `rag.splitting` where it may be cut if it is over budget.
A list item or block quote that holds a fence or a table also lists its `parts` (prose runs, code,
tables), so an oversize one is cut at those and never inside a fence or a table row.
HTML comments and base64 `data:` URIs are dropped from prose: they are invisible when rendered
(an editor's note, an inlined image) and carry no words to find.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass

import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark").enable("table")
_BLOCK_OPENERS = {"paragraph_open", "table_open", "html_block"}
_VERBATIM = {"fence", "code_block", "table_open"}  # never cut inside, never cleaned
_HIDDEN = re.compile(
    r"(`+)[\s\S]*?(?<!`)\1(?!`)"  # a code span: kept as it is, so its comment or URI is kept too
    r"|<!--[\s\S]*?-->"
    r"|\bdata:[a-z]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,[A-Za-z0-9+/]*=*",
    re.IGNORECASE,
)
_QUOTE_MARK = re.compile(r"^[ \t]*>[ \t]?")
_ITEM_MARK = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")


@dataclass(frozen=True)
class Block:
    text: str
    kind: str  # prose | code | table
    fence: tuple[str, str] = ("", "")  # opening and closing fence lines of a code block
    parts: tuple[Block, ...] = ()  # a list item's or quote's prose, code and tables, if it holds code or a table


def markdown_sections(text: str) -> list[tuple[tuple[tuple[int, str], ...], list[Block]]]:
    """(heading stack, blocks) per section, in document order; empty sections dropped."""
    lines = text.splitlines()
    tokens = _PARSER.parse(text)
    stack: list[tuple[int, str]] = []
    sections: list[tuple[tuple[tuple[int, str], ...], list[Block]]] = [((), [])]

    def source(start: int, end: int) -> str:
        return "\n".join(lines[start:end]).strip("\n")

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.map is None:
            i += 1
            continue
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            stack = [h for h in stack if h[0] < level] + [(level, _heading_text(tokens[i + 1].content))]
            sections.append((tuple(stack), []))
        elif tok.type in ("bullet_list_open", "ordered_list_open", "blockquote_open"):
            end = _closing(tokens, i)
            items = [i] if tok.type == "blockquote_open" else [
                j for j in range(i + 1, end) if tokens[j].type == "list_item_open" and tokens[j].level == 1
            ]
            for j in items:
                if tokens[j].map:
                    sections[-1][1].append(_container(tokens[j : _closing(tokens, j) + 1], lines))
            i = end
        elif tok.type in ("fence", "code_block"):
            sections[-1][1].append(_code(tok, source(*tok.map)))
        elif tok.type == "table_open":
            sections[-1][1].append(Block(source(*tok.map), "table"))
        elif tok.type in _BLOCK_OPENERS:
            sections[-1][1].append(Block(clean_prose(source(*tok.map)), "prose"))
        i += 1
    return [(h, [b for b in blocks if b.text.strip()]) for h, blocks in sections if any(b.text.strip() for b in blocks)]


# CRLF too: a file saved on Windows kept its metadata as the title and in every heading path.
_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?\r?\n)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
# Hugo's TOML front matter, between `+++` lines: it was indexed as the first chunk's opening paragraph.
_TOML_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?\+\+\+[ \t]*\r?\n(.*?\r?\n)\+\+\+[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_TOML_TITLE = re.compile(r"^title[ \t]*=[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_BLOCK_SCALAR = re.compile(r"[>|][+-]?\d?[+-]?")  # `title: >-` : the title is on the indented lines below


def split_front_matter(markdown: str) -> tuple[str | None, str]:
    """(its `title:`, the rest) of a Markdown file that opens with YAML (or Hugo's TOML) front matter (Jekyll, Hugo,
    Docusaurus); (None, the text) otherwise. Unstripped, its closing `---` made the block above it a
    setext heading, so every chunk's heading path held the metadata."""
    match = _FRONT_MATTER.match(markdown) or _TOML_FRONT_MATTER.match(markdown)
    if match is None:
        return None, markdown
    title = (_FRONT_TITLE if match.re is _FRONT_MATTER else _TOML_TITLE).search(match.group(1))
    value = title.group(1).strip() if title else ""  # `.strip()`: a CRLF file's line keeps its "\r"
    if title and match.re is _FRONT_MATTER and _BLOCK_SCALAR.fullmatch(value):  # folded over lines; it was titled ">-"
        below = match.group(1)[title.end():].lstrip("\r\n").splitlines()
        value = " ".join(line.strip() for line in itertools.takewhile(lambda line: line[:1] in (" ", "\t"), below))
        value = value.strip().strip("\"'")
    elif title:
        value = _title_value(value, toml=match.re is _TOML_FRONT_MATTER)
    value = value.strip()
    return value or None, markdown[match.end():]


def _title_value(written: str, *, toml: bool) -> str:
    """A front matter's title as its format (TOML, else YAML) reads the value: quotes and escapes resolved, a
    trailing `# comment` dropped (`"X" # menu label` titled the page `X" # menu label`). What the format does
    not read as a string (an unquoted TOML title; YAML's `Q&A: billing`, `Yes`, a date) is taken as written,
    less its quotes."""
    try:
        value = tomllib.loads(f"title = {written}")["title"] if toml else yaml.safe_load(f"title: {written}")["title"]
    except (tomllib.TOMLDecodeError, yaml.YAMLError, KeyError, TypeError):
        value = None
    return value if isinstance(value, str) else written.strip("\"'")


def heading_texts(markdown: str) -> list[str]:
    """Every heading's text, in document order (a page that is only headings is its outline)."""
    tokens = _PARSER.parse(markdown)
    texts = (_heading_text(tokens[i + 1].content) for i, tok in enumerate(tokens) if tok.type == "heading_open")
    return [text for text in texts if text]


def first_heading(markdown: str) -> str | None:
    """The text of the document's first level-1 heading, ATX or setext, as CommonMark parses it:
    a `# comment` inside a code fence and a `#hashtag` line (no space) are not headings. Only level 1:
    a document that opens at `## Install` has no title of its own (the file name serves), else every
    heading path started `Install > Install`."""
    tokens = _PARSER.parse(markdown)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.level == 0 and tok.tag == "h1":
            return _heading_text(tokens[i + 1].content) or None
    return None


def clean_prose(text: str) -> str:
    """`text` without HTML comments and base64 `data:` URIs (code spans kept as they are)."""
    if "<!--" not in text and "data:" not in text.lower():
        return text  # the common case, and ordinary documents stay byte for byte as they were
    return _HIDDEN.sub(lambda m: m.group() if m.group(1) else "", text)


def paragraph_blocks(text: str) -> list[Block]:
    return [Block(p.strip(), "prose") for p in re.split(r"\n\s*\n", text) if p.strip()]


def _heading_text(content: str) -> str:
    """A heading's words as a reader sees them: `**Bold** [link](url) `code`` is `Bold link code`
    (the path becomes a citation's title and the embedded prefix); inline HTML is dropped."""
    words: list[str] = []
    for token in _PARSER.parseInline(clean_prose(content)):
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                words.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                words.append(" ")
    return " ".join("".join(words).split())


def _closing(tokens: list[Token], start: int) -> int:
    """Index of the token that closes the container opened at `start`."""
    close = tokens[start].type.replace("_open", "_close")
    j = start + 1
    while tokens[j].type != close or tokens[j].level != tokens[start].level:
        j += 1
    return j


def _code(tok: Token, body: str) -> Block:
    """A top-level fence or indented code block, as its source lines."""
    if tok.type != "fence":
        return Block(body, "code")
    lines = body.splitlines()
    closing = lines[-1] if len(lines) > 1 and lines[-1].strip().startswith(tok.markup) else tok.markup
    return Block(body, "code", (lines[0], closing))


def _container(tokens: list[Token], lines: list[str]) -> Block:
    """A list item or block quote (`tokens` from its opener to its closer) as one prose block.

    If it holds a fence or a table, that becomes a part of its own kind, and the source lines
    around it prose parts: an oversize item is then cut at those parts, never inside one."""
    start, end = tokens[0].map or (0, 0)
    texts: list[str] = []  # the item's source, cleaned outside its code and tables
    parts: list[Block] = []
    cursor, quotes = start, 0
    item_starts = {t.map[0] for t in tokens if t.type == "list_item_open" and t.map}
    for tok in tokens:
        quotes += {"blockquote_open": 1, "blockquote_close": -1}.get(tok.type, 0)
        if tok.type in _VERBATIM and tok.map:
            first, last = tok.map
            if cursor < first:
                texts.append(clean_prose("\n".join(lines[cursor:first])))
                parts.append(Block(texts[-1].strip("\n"), "prose"))
            parts.append(_nested(tok, lines[first:last], quotes=quotes, item=first in item_starts))
            texts.append("\n".join(lines[first:last]))
            cursor = last
    if cursor < end or not parts:
        texts.append(clean_prose("\n".join(lines[cursor:end])))
        parts.append(Block(texts[-1].strip("\n"), "prose"))
    text = "\n".join(texts).strip("\n")
    if not _ITEM_MARK.sub("", text).replace(">", "").strip():
        return Block("", "prose")  # an item that held only a comment, not a bare "-" to index
    if all(p.kind == "prose" for p in parts):
        return Block(text, "prose")
    return Block(text, "prose", parts=tuple(p for p in parts if p.text.replace(">", "").strip()))


def _nested(tok: Token, lines: list[str], *, quotes: int, item: bool) -> Block:
    """A fence, indented code or table inside a list item or quote, freed of the markers and
    indentation of its containers, so it is cut and re-wrapped like a top-level one."""
    if tok.type == "fence":
        opening = tok.markup + tok.info
        return Block("\n".join([opening, *tok.content.splitlines(), tok.markup]), "code", (opening, tok.markup))
    if tok.type == "code_block":
        return Block("\n".join("    " + line for line in tok.content.splitlines()), "code")
    return Block("\n".join(_unmark(line, quotes=quotes, item=item and n == 0) for n, line in enumerate(lines)), "table")


def _unmark(line: str, *, quotes: int, item: bool) -> str:
    """A table row without its containers' quote markers and, on an item's first line
    ("1. | a | b |"), list markers, in whichever order they nest."""
    while True:
        if quotes and _QUOTE_MARK.match(line):
            line, quotes = _QUOTE_MARK.sub("", line, count=1), quotes - 1
        elif item and _ITEM_MARK.match(line):
            line = _ITEM_MARK.sub("", line, count=1)
        else:
            return line.strip()
