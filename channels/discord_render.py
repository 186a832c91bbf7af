"""Answer Markdown → Discord Markdown, split into 2000-character chunks with stable nonces.

An HTML entity in the answer (`&amp;`) becomes its character, as CommonMark reads it (Discord showed it as typed).
A code block is fenced with ```, and ``` inside one is broken with zero-width spaces (`_code_block`).
"""

from __future__ import annotations

import hashlib
import html
import re

from markdown_it import MarkdownIt

from channels.citations import render_citations
from channels.render import fence_spans, outside, split_text
from channels.split_spans import BLOCK_START
from gateway.models import OutboundMessage

MAX_LENGTH = 2000
# Only to find tables and their cells; everything else passes through as written.
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")
_SMALL_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(")
# Discord shows an HTML entity as typed ("A &amp; B"); CommonMark reads it as its character. Inline code
# keeps it as written, as CommonMark does.
_ENTITY_OR_CODE = re.compile(r"(`+)[^`].*?\1|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});", re.DOTALL)
_MARKUP = set("\\`*_~|<>[]()#-:")
_FENCE_LINE = re.compile(r"^([ >]*)(`{3,}|~{3,})(.*)$")  # a fence's line, after its indent or quote marks
_TICKS = re.compile(r"`{3,}")
# A body that starts with one of these (a heading, list, quote, code fence, Discord's `-#` subtext) is Markdown only
# at the start of a line.
_STARTS_A_BLOCK = re.compile(rf"{BLOCK_START.pattern}|-#[ \t]")
ZERO_WIDTH_SPACE = "\u200b"


def to_discord_markdown(text: str) -> str:
    """CommonMark-ish answer → Discord Markdown: mostly the same; small headings and images adapted."""
    # Code blocks pass through untouched: the real ones only. A line that merely starts with inline code
    # ("```a``` is…") was taken for a fence, and the prose after it, up to the next ``` line, went unconverted.
    return outside(fence_spans(text), text, _convert_prose, inside=_code_block)


def _code_block(block: str) -> str:
    """A fenced code block as Discord can show it. Discord ends a block at the first ``` in it and knows
    no longer fence (````) nor ~~~: the fence becomes ```, and a run of three backticks or more inside
    keeps its look with a zero-width space between its backticks (it is copied with them); one left unclosed is
    closed."""
    lines = block.split("\n")
    opener = _FENCE_LINE.match(lines[0])
    if opener is None:
        return block
    prefix, marker, info = opener.groups()
    closer = _FENCE_LINE.match(lines[-1]) if len(lines) > 1 else None
    closed = (closer is not None and not closer.group(3).strip() and closer.group(2)[0] == marker[0]
              and len(closer.group(2)) >= len(marker))
    body = lines[1:-1] if closed else lines[1:]
    shown = [f"{prefix}```{_breaking_ticks(info)}", *(_breaking_ticks(line) for line in body)]
    # One left unclosed (an answer cut off in it) ends with its container on CommonMark; Discord shows it as typed.
    return "\n".join(shown + [f"{closer.group(1) if closer is not None and closed else prefix}```"])


def _breaking_ticks(line: str) -> str:
    return _TICKS.sub(lambda run: ZERO_WIDTH_SPACE.join(run.group(0)), line)


def _convert_prose(text: str) -> str:
    # Discord renders only #, ## and ###; deeper headings would show their hashes.
    text = _SMALL_HEADING.sub(r"**\1**", text)
    # Discord does not render inline images; keep them as links.
    return _entities_as_characters(_tables_as_rows(_IMAGE.sub(r"[\1](", text)))


def _entities_as_characters(text: str) -> str:
    """`&amp;` → `&`; a character Discord reads as markup (`&#42;` → `*`) is backslash-escaped, as CommonMark
    shows it literally."""
    if "&" not in text:
        return text

    def character(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(0)
        char = html.unescape(match.group(0))
        return "\\" + char if char in _MARKUP else char

    return _ENTITY_OR_CODE.sub(character, text)


def _tables_as_rows(text: str) -> str:
    """Discord renders no tables: the customer saw `| Plan | Price |` and `|---|---|` as typed. Each row
    becomes `a | b` (the header's cells bold), as on Telegram, Slack and WhatsApp."""
    if "|" not in text:
        return text
    lines = text.split("\n")
    tables: list[tuple[int, int, list[str]]] = []
    rows: list[str] = []
    cells: list[str] = []
    start = end = 0
    for tok in _MD.parse(text):
        if tok.type == "table_open" and tok.level == 0 and tok.map:
            (start, end), rows = tok.map, []
        elif tok.type in ("th_open", "td_open"):
            cells.append("")
        elif tok.type == "inline" and cells and cells[-1] == "":
            cells[-1] = tok.content.strip()
        elif tok.type == "th_close" and cells[-1] and not cells[-1].startswith("**"):
            cells[-1] = f"**{cells[-1]}**"
        elif tok.type == "tr_close":
            if any(cells):
                rows.append(" | ".join(cells))
            cells = []
        elif tok.type == "table_close" and tok.level == 0:
            tables.append((start, end, rows))
    for start, end, rows in reversed(tables):
        lines[start:end] = rows
    return "\n".join(lines)


def render_message(message: OutboundMessage, *, mention: str | None = None) -> list[str]:
    """The chunks, each at most 2000 characters, that make up one reply with its sources.

    `mention` is a member's id to address the reply to, as `<@id>` in front of it."""
    body = to_discord_markdown(message.text).strip()
    if mention:
        body = addressed(body, mention)
    footer = render_citations(message.citations, style="markdown", heading=message.sources_heading)
    full = f"{body}\n\n{footer}" if body and footer else body or footer
    return split_text(full, limit=MAX_LENGTH)


def addressed(body: str, member: str) -> str:
    """`body` addressed to `member`: `<@id>` in front, on a line of its own when `body` starts with block Markdown.
    Why: Discord reads a heading, list, quote or code fence only at a line's start; behind the mention an operator's
    "## Hours" showed as typed, and a long code block was no fence to `split_text`, cut without being reopened."""
    if not body.strip():
        return body
    return f"<@{member}>{chr(10) if _STARTS_A_BLOCK.match(body) else ' '}{body}"


def unaddressed(content: str, member: str | None) -> str:
    """`content` without the mention `addressed` put in front of it."""
    for sep in (" ", "\n"):
        if member and content.startswith(f"<@{member}>{sep}"):
            return content[len(f"<@{member}>{sep}"):]
    return content


def chunk_nonce(message: OutboundMessage, index: int) -> str:
    """A nonce (max 25 chars) stable across retries of the same chunk of the same reply, and another reply's
    own: the outbox's message id (`idempotency_key`) is in it. Why: Discord returns the message an earlier
    post with the same nonce created, for a few minutes, and two replies of the same text in a conversation
    (an operator's "one moment" sent twice) made the same one: the second was never posted, yet marked sent."""
    key = (f"{message.idempotency_key or ''}|{message.conversation.chat}|{message.conversation.thread}|"
           f"{message.reply_to}|{index}|{message.text}")
    return hashlib.sha256(key.encode()).hexdigest()[:25]
