"""The numbered "Sources" footer under an answer, each citation a link in the channel's dialect."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Literal

from gateway.models import SOURCES_HEADING, Citation

CitationStyle = Literal["markdown", "html", "mrkdwn", "plain"]


def render_citations(
    citations: Iterable[Citation], *, style: CitationStyle, heading: str = SOURCES_HEADING
) -> str:
    """A numbered footer under `heading` (a bot's `replies.sources_heading`), with each citation as a
    link in the given dialect.

    `markdown` gives `[title](url)`, `html` an escaped `<a href>`, `mrkdwn` Slack's `<url|title>`,
    and `plain` `title (url)`; the heading is bold where the dialect has bold. Duplicates are dropped;
    citations without a URL are listed by title. Returns "" when there is nothing to cite.
    """
    seen: set[tuple[str, str | None]] = set()
    lines: list[str] = []
    for citation in citations:
        title = (citation.title or citation.source).strip() or citation.source
        key = (title, citation.url)
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"{len(lines) + 1}. {_link(title, citation.url, style)}")
    if not lines:
        return ""
    return "\n".join([_bold(heading.strip(), style), *lines])


def _bold(text: str, style: CitationStyle) -> str:
    if not text or style == "plain":
        return text
    if style == "html":
        return f"<b>{html.escape(text)}</b>"
    if style == "mrkdwn":
        return f"*{_mrkdwn_text(text)}*"
    return f"**{text}**"


def _mrkdwn_text(text: str) -> str:
    """`text` with the three characters Slack treats as control (& < >) escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(title: str, url: str | None, style: CitationStyle) -> str:
    if style == "html":
        if not url:
            return html.escape(title)
        return f'<a href="{html.escape(url, quote=True)}">{html.escape(title)}</a>'
    if style == "mrkdwn":
        safe = _mrkdwn_text(title)
        return f"<{url}|{safe.replace('|', '¦')}>" if url else safe
    if style == "markdown":
        if not url:
            return title
        safe = title.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
        return f"[{safe}](<{url}>)" if any(c in url for c in " ()") else f"[{safe}]({url})"
    return f"{title} ({url})" if url else title
