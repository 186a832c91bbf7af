"""Markdown to Telegram HTML, and splitting a reply into messages that fit Telegram's limit.

Telegram's HTML dialect knows only a handful of tags (b, i, u, s, a, code, pre, blockquote,
tg-spoiler) and rejects anything else, or any bare `<`, with "can't parse entities". So we parse the
LLM's Markdown with markdown-it-py and emit only those tags: headings become bold lines, lists become
bullet or numbered lines, tables become `a | b` lines, and every text run is escaped. Raw HTML in the
Markdown is treated as text, never passed through. Telegram's links can't contain code or another
link, so inside a link inline code and a linked image are its plain text.

Telegram counts its 4096 limit in UTF-16 units of the *visible* text (after entity parsing), which is
what `visible_text` gives back.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

from channels.citations import render_citations
from channels.render import split_text, utf16_len
from gateway.models import SOURCES_HEADING, Citation

TELEGRAM_LIMIT = 4096
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_TAG = re.compile(r"<[^>]*>")

# One parser for the process: MarkdownIt instances are reusable and parsing is pure.
_MD = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _safe_href(url: str) -> str | None:
    return html.escape(url, quote=True) if url.lower().startswith(_SAFE_SCHEMES) else None


class _HtmlWriter:
    """Walks markdown-it's token stream once and writes Telegram HTML."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.lists: list[list[int | None]] = []  # per open list: [next number] or [None] for bullets
        self.quote_depth = 0
        self.links: list[bool] = []  # whether each open link emitted an <a>
        self.cells = 0  # cells written in the current table row

    def text(self) -> str:
        return "".join(self.out).strip()

    def _end_block(self, newlines: int = 2) -> None:
        """Make the output end with exactly `newlines` line breaks (never touches code contents)."""
        joined = "".join(self.out)
        stripped = joined.rstrip("\n")
        self.out = [stripped + ("\n" * newlines if stripped else "")]

    def render(self, tokens: Sequence[Token]) -> str:
        for tok in tokens:
            handler = getattr(self, f"_{tok.type}", None)
            if handler is not None:
                handler(tok)
        return self.text()

    # Blocks
    def _paragraph_close(self, tok: Token) -> None:
        self._end_block(1 if tok.hidden else 2)

    def _heading_open(self, tok: Token) -> None:
        self.out.append("<b>")

    def _heading_close(self, tok: Token) -> None:
        self.out.append("</b>")
        self._end_block()

    def _bullet_list_open(self, tok: Token) -> None:
        self.lists.append([None])

    def _ordered_list_open(self, tok: Token) -> None:
        start = tok.attrGet("start")
        self.lists.append([int(start) if start is not None else 1])

    def _bullet_list_close(self, tok: Token) -> None:
        self.lists.pop()
        self._end_block(1 if self.lists else 2)

    _ordered_list_close = _bullet_list_close

    def _list_item_open(self, tok: Token) -> None:
        if self.out and not "".join(self.out).endswith("\n"):
            self._end_block(1)
        state = self.lists[-1]
        indent = "    " * (len(self.lists) - 1)
        if state[0] is None:
            self.out.append(f"{indent}• " if len(self.lists) == 1 else f"{indent}◦ ")
        else:
            self.out.append(f"{indent}{state[0]}. ")
            state[0] += 1

    def _list_item_close(self, tok: Token) -> None:
        self._end_block(1)

    def _blockquote_open(self, tok: Token) -> None:
        # Telegram does not nest blockquotes; only the outermost one becomes a tag.
        self.quote_depth += 1
        if self.quote_depth == 1:
            self.out.append("<blockquote>")

    def _blockquote_close(self, tok: Token) -> None:
        self.quote_depth -= 1
        if self.quote_depth == 0:
            self._end_block(0)
            self.out.append("</blockquote>")
            self._end_block()

    def _fence(self, tok: Token) -> None:
        code = _esc(tok.content.rstrip("\n"))
        lang = tok.info.split()[0] if tok.info.strip() else ""
        if lang and re.fullmatch(r"[\w+#.-]{1,32}", lang):
            self.out.append(f'<pre><code class="language-{lang}">{code}</code></pre>')
        else:
            self.out.append(f"<pre>{code}</pre>")
        self._end_block()

    _code_block = _fence

    def _hr(self, tok: Token) -> None:
        self.out.append("———")
        self._end_block()

    def _tr_open(self, tok: Token) -> None:
        self.cells = 0

    def _td_open(self, tok: Token) -> None:
        if self.cells:
            self.out.append(" | ")
        self.cells += 1

    def _th_open(self, tok: Token) -> None:
        self._td_open(tok)
        self.out.append("<b>")

    def _th_close(self, tok: Token) -> None:
        self.out.append("</b>")

    def _tr_close(self, tok: Token) -> None:
        self._end_block(1)

    def _table_close(self, tok: Token) -> None:
        self._end_block()

    def _inline(self, tok: Token) -> None:
        self.out.append(self._inline_html(tok.children or []))

    # Inline
    def _inline_html(self, children: Sequence[Token]) -> str:
        parts: list[str] = []
        for child in children:
            kind = child.type
            if kind == "text":
                parts.append(_esc(child.content))
            elif kind == "code_inline":
                # Telegram's links and code can't contain each other: inside a link, code is its text.
                parts.append(_esc(child.content) if any(self.links) else f"<code>{_esc(child.content)}</code>")
            elif kind in ("softbreak", "hardbreak"):
                parts.append("\n")
            elif kind in ("strong_open", "strong_close", "em_open", "em_close", "s_open", "s_close"):
                tag = {"strong": "b", "em": "i", "s": "s"}[kind.rsplit("_", 1)[0]]
                parts.append(f"</{tag}>" if kind.endswith("close") else f"<{tag}>")
            elif kind == "link_open":
                href = _safe_href(str(child.attrGet("href") or ""))
                self.links.append(href is not None)
                if href is not None:
                    parts.append(f'<a href="{href}">')
            elif kind == "link_close":
                if self.links.pop():
                    parts.append("</a>")
            elif kind == "image":
                src = str(child.attrGet("src") or "")
                label = _esc(child.content or src)
                href = _safe_href(src)
                # Nor can a link hold another: a linked image is the outer link's text.
                parts.append(f'<a href="{href}">{label}</a>' if href and not any(self.links) else label)
            elif kind in ("html_inline",):
                parts.append(_esc(child.content))
        return "".join(parts)


def markdown_to_html(text: str) -> str:
    """Render Markdown as Telegram HTML (parse_mode HTML): only Telegram's tags, text escaped."""
    return _HtmlWriter().render(_MD.parse(text))


def visible_text(telegram_html: str) -> str:
    """The text a user sees for our own HTML: tags removed, entities decoded."""
    return html.unescape(_TAG.sub("", telegram_html))


def visible_length(telegram_html: str) -> int:
    """Telegram's length of a message: UTF-16 units of its visible text."""
    return utf16_len(visible_text(telegram_html))


def render_messages(text: str, citations: Sequence[Citation] = (), *, limit: int = TELEGRAM_LIMIT,
                    mention: tuple[str, str] | None = None, sources_heading: str = SOURCES_HEADING) -> list[str]:
    """Markdown answer plus citations → Telegram HTML messages, each within `limit` visible UTF-16 units.

    The Markdown is split first (on paragraph, line, sentence boundaries, never inside code or a URL)
    and each part is rendered on its own, so no tag ever spans two messages. The citation footer joins
    the last message when it fits, else it becomes a message of its own. `mention` (a user id and
    name) puts a text mention of that user in front of the first message, which notifies them.
    """
    prefix = mention_html(*mention) if mention is not None else ""
    if prefix:
        limit -= visible_length(prefix)  # every part leaves room for it: the first one carries it
    messages = [m for part in split_text(text, limit=limit, unit="utf16") for m in _render_part(part, limit)]
    if prefix and messages:
        messages[0] = prefix + messages[0]
    footer = render_citations(citations, style="html", heading=sources_heading)
    if footer:
        if messages and visible_length(messages[-1] + "\n\n" + footer) <= limit:
            messages[-1] = messages[-1] + "\n\n" + footer
        else:
            messages.extend(_split_footer(footer, limit))
    return messages


def mention_html(user_id: str, name: str) -> str:
    """A text mention of a member (it notifies them), with the space after it, to put in front of a message."""
    return f'<a href="tg://user?id={int(user_id)}">{_esc(name.strip() or user_id)}</a> '


def _render_part(part: str, limit: int) -> list[str]:
    rendered = markdown_to_html(part)
    if not visible_text(rendered).strip():
        return []
    excess = visible_length(rendered) - limit
    if excess <= 0:
        return [rendered]
    # Rendering rarely lengthens text (list bullets, table bars); re-split tighter when it does.
    smaller = max(limit - excess - 32, limit // 2)
    return [m for sub in split_text(part, limit=smaller, unit="utf16") for m in _render_part(sub, limit)]


def _split_footer(footer: str, limit: int) -> list[str]:
    """A footer longer than one message (many citations) is cut between its lines."""
    messages: list[str] = []
    current = ""
    for line in footer.split("\n"):
        candidate = f"{current}\n{line}" if current else line
        if current and visible_length(candidate) > limit:
            messages.append(current)
            candidate = line
        current = candidate
    if current:
        messages.append(current)
    return messages
