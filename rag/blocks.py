"""A document's own blocks, the units chunking packs: paragraphs, list items, code, tables, quotes.

Markdown (and HTML and PDF, which arrive as Markdown) is parsed with markdown-it-py, so a code fence
or a table is one block and is never cut by a blank line inside it; plain text is split into
paragraphs at blank lines. Each Markdown block is kept as its source lines, under the heading stack
of its section. A block's `kind` tells `rag.splitting` where it may be cut if it is over budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

_PARSER = MarkdownIt("commonmark").enable("table")
_BLOCK_OPENERS = {"paragraph_open", "blockquote_open", "table_open", "html_block"}


@dataclass(frozen=True)
class Block:
    text: str
    kind: str  # prose | code | table
    fence: tuple[str, str] = ("", "")  # opening and closing fence lines of a code block


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
            heading = " ".join(tokens[i + 1].content.split())
            stack = [h for h in stack if h[0] < level] + [(level, heading)]
            sections.append((tuple(stack), []))
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            j = i + 1
            while tokens[j].type not in ("bullet_list_close", "ordered_list_close") or tokens[j].level != 0:
                if tokens[j].type == "list_item_open" and tokens[j].level == 1 and tokens[j].map:
                    sections[-1][1].append(Block(source(*tokens[j].map), "prose"))
                j += 1
            i = j
        elif tok.type in ("fence", "code_block"):
            body = source(*tok.map)
            if tok.type == "fence":
                block_lines = body.splitlines()
                closing = block_lines[-1] if len(block_lines) > 1 and block_lines[-1].strip().startswith(tok.markup) else tok.markup
                sections[-1][1].append(Block(body, "code", (block_lines[0], closing)))
            else:
                sections[-1][1].append(Block(body, "code"))
        elif tok.type == "table_open":
            sections[-1][1].append(Block(source(*tok.map), "table"))
        elif tok.type in _BLOCK_OPENERS:
            sections[-1][1].append(Block(source(*tok.map), "prose"))
        i += 1
    return [(h, [b for b in blocks if b.text.strip()]) for h, blocks in sections if any(b.text.strip() for b in blocks)]


def paragraph_blocks(text: str) -> list[Block]:
    return [Block(p.strip(), "prose") for p in re.split(r"\n\s*\n", text) if p.strip()]
