"""Markdown to WhatsApp's light formatting.

WhatsApp renders `*bold*`, `_italic_`, `~strikethrough~`, `` `inline code` ``, ```` ``` ```` blocks,
`- ` and `1. ` lists and `> ` quotes, and nothing else: no headings, no link syntax. Headings become
bold lines; links become "title (url)" so the URL stays tappable; tables become `a | b` rows. The
answer is parsed with markdown-it (CommonMark), so emphasis inside code is left alone. HTML is not
parsed: WhatsApp shows text as it is, so "Type <your email>" or "press <Enter>" arrives as typed (as
HTML they were tags, and dropped); only `<br>`, which a model writes in a table cell, becomes a line break.
A mark the answer escapes (`\\*`) has no escape on WhatsApp, so a look-alike (∗ ＿ ∼ ˋ) is sent for it.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from channels.render import LITERAL_MARKS

# text_join off: an escaped or entity character (`\*`, `&#42;`) stays its own token, so it can be kept literal.
_md = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"]).disable("text_join")
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def to_whatsapp(markdown: str) -> str:
    """Markdown to WhatsApp's light formatting; links become "title (url)"."""
    if not markdown.strip():
        return ""
    root = SyntaxTreeNode(_md.parse(markdown))
    return _blocks(root.children, tight=False).strip("\n")


def _blocks(nodes: list[SyntaxTreeNode], *, tight: bool) -> str:
    return ("\n" if tight else "\n\n").join(b for b in (_block(n) for n in nodes) if b)


def _block(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline(node.children)
    if kind == "heading":
        title = _inline(node.children, plain_emphasis=True).strip()
        return f"*{title}*" if title else ""
    if kind in ("fence", "code_block"):
        return "```\n" + node.content.rstrip("\n") + "\n```"
    if kind in ("bullet_list", "ordered_list"):
        start = int(node.attrs.get("start", 1)) if kind == "ordered_list" else 0
        tight = all(p.hidden for item in node.children for p in item.children if p.type == "paragraph")
        lines = []
        for i, item in enumerate(node.children):
            marker = f"{start + i}. " if kind == "ordered_list" else "- "
            body = _blocks(item.children, tight=tight).replace("\n", "\n" + " " * len(marker))
            lines.append(marker + body)
        return ("\n" if tight else "\n\n").join(lines)
    if kind == "blockquote":
        return "\n".join("> " + line if line else ">" for line in _blocks(node.children, tight=False).split("\n"))
    if kind == "hr":
        return "———"
    if kind == "table":
        rows = [row for section in node.children for row in section.children]
        return "\n".join(" | ".join(_inline(cell.children) for cell in row.children) for row in rows)
    return _blocks(node.children, tight=False) if node.children else node.content


def _inline(nodes: list[SyntaxTreeNode], *, plain_emphasis: bool = False) -> str:
    out: list[str] = []
    for node in nodes:
        if node.type == "inline":
            out.append(_inline(node.children, plain_emphasis=plain_emphasis))
        elif node.type == "text":
            out.append(_BR.sub("\n", node.content))
        elif node.type == "text_special":
            out.append(LITERAL_MARKS.get(node.content, node.content))
        elif node.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif node.type == "code_inline":
            out.append(f"`{node.content}`")
        elif node.type in ("strong", "em", "s"):
            inner = _inline(node.children, plain_emphasis=plain_emphasis)
            mark = "" if plain_emphasis or not inner.strip() else {"strong": "*", "em": "_", "s": "~"}[node.type]
            out.append(f"{mark}{inner}{mark}")
        elif node.type in ("link", "image"):
            url = str(node.attrs.get("href") or node.attrs.get("src") or "")
            title = _inline(node.children, plain_emphasis=plain_emphasis) if node.type == "link" else node.content
            title = title.strip()
            if not url or title in (url, url.removeprefix("mailto:")):
                out.append(title or url)
            else:
                out.append(f"{title} ({url})" if title else url)
        else:
            out.append(_inline(node.children, plain_emphasis=plain_emphasis) if node.children else node.content)
    return "".join(out)
