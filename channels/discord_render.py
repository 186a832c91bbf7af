"""Answer Markdown → Discord Markdown, split into 2000-character chunks with stable nonces."""

from __future__ import annotations

import hashlib
import re

from channels.render import render_citations, split_text
from gateway.models import OutboundMessage

MAX_LENGTH = 2000
_SMALL_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~).*?^ {0,3}(?:```|~~~)[^\S\n]*$", re.MULTILINE | re.DOTALL)


def to_discord_markdown(text: str) -> str:
    """CommonMark-ish answer → Discord Markdown: mostly the same; small headings and images adapted."""
    out, pos = [], 0
    for fence in _FENCE.finditer(text):  # code blocks pass through untouched
        out.append(_convert_prose(text[pos : fence.start()]))
        out.append(fence.group(0))
        pos = fence.end()
    out.append(_convert_prose(text[pos:]))
    return "".join(out)


def _convert_prose(text: str) -> str:
    # Discord renders only #, ## and ###; deeper headings would show their hashes.
    text = _SMALL_HEADING.sub(r"**\1**", text)
    # Discord does not render inline images; keep them as links.
    return _IMAGE.sub(r"[\1](", text)


def render_message(message: OutboundMessage, *, mention: str | None = None) -> list[str]:
    """The chunks, each at most 2000 characters, that make up one reply with its sources.

    `mention` is a member's id to address the reply to, as `<@id>` in front of it."""
    body = to_discord_markdown(message.text).strip()
    if mention and body:
        body = f"<@{mention}> {body}"
    footer = render_citations(message.citations, style="markdown", heading="**Sources:**")
    full = f"{body}\n\n{footer}" if body and footer else body or footer
    return split_text(full, limit=MAX_LENGTH)


def chunk_nonce(message: OutboundMessage, index: int) -> str:
    """A nonce (max 25 chars) stable across retries of the same chunk of the same reply."""
    key = f"{message.conversation.chat}|{message.conversation.thread}|{message.reply_to}|{index}|{message.text}"
    return hashlib.sha256(key.encode()).hexdigest()[:25]
