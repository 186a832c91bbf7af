"""Gate 2's link check: an answer sends the customer only where the extracts or a tool sent it.

A model's answer may cite [1] and still point at `https://acme-pay.example/card`. A link that neither
an extract, its URL, the bot's own texts nor a tool's link value holds is taken out: a Markdown link
keeps its label (the widget shows only the label anyway), and a sentence holding an unknown bare URL
goes whole. A bare domain with a common top-level domain ("acme-billing.com/pay") is a link too: chat
apps make it one. Taking out only the URL left "Pay at or click here." behind, and kept the instruction the
link was for ("send your card number to …") when a tool's text had planted it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.pipeline.sentences import keep_sentences

# A URL may hold one level of parentheses: `https://en.wikipedia.org/wiki/Fee_(banking)`, `javascript:alert(1)`.
MARKDOWN_LINK = re.compile(r"\[([^\]\n]*)\]\(\s*<?((?:[^()\s>]|\([^()\s]*\))*)>?(?:\s+\"[^\"]*\")?\s*\)")
# Chat apps turn a bare domain into a link too ("enter your card at acme-billing.com/pay"), so one written
# in lower case with a common top-level domain counts. Not: "config.yaml", "README.md", "ASP.NET",
# "Socket.IO", a call (`logger.info()`), an e-mail address's parts, or anything in inline code.
_TLDS = ("com|net|org|io|co|ai|app|dev|info|biz|me|xyz|online|site|shop|store|link|click|top|live|ly|gg|tv"
         "|us|uk|de|fr|es|it|nl|eu|ru|cn|in|br|au|ca|ch|se|pl|jp|example")
# In any case with a path after it ("Attacker-billing.com/pay" opening a sentence, "evil.COM/login"): a
# file or product name ("Mail.app", "ASP.NET") has no path, and chat apps link such a domain all the same.
_BARE_URL = re.compile(
    r"(?i:https?://|www\.)[^\s<>()\[\]\"']+"
    rf"|(?<![\w@./:-])(?:[a-z0-9](?:[a-z0-9-]{{0,61}}[a-z0-9])?\.)+(?:{_TLDS})\b(?![.-]?\w|\(|@)"
    r"(?:/[^\s<>()\[\]\"']*)?"
    rf"|(?<![\w@./:-])(?i:(?:[a-z0-9](?:[a-z0-9-]{{0,61}}[a-z0-9])?\.)+(?:{_TLDS}))/[^\s<>()\[\]\"']*")
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def link_values(value: Any) -> list[str]:
    """The strings in a tool's result that are each one link and nothing else, at any depth (a JSON
    text is read as JSON). Only these vouch for a link: a link inside a text field is text someone
    may have written there. Walked with a stack, not recursion: a result nested thousands deep (a JSON
    text of "[[[[…") raised RecursionError, which failed the turn."""
    links: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            stripped = item.strip()
            if stripped[:1] in "[{":
                try:
                    pending.append(json.loads(stripped))
                except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
                    pass
            elif _BARE_URL.fullmatch(stripped):
                links.append(stripped)
        elif isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            pending.extend(reversed(item))
    return links


def _url_key(url: str) -> str:
    return url.lower().rstrip(".,;:!?/").removeprefix("https://").removeprefix("http://").removeprefix("www.")


def _bare_links(text: str) -> list[str]:
    """The bare URLs and domains in `text` that gate 2 checks: none inside inline code."""
    return _BARE_URL.findall(_INLINE_CODE.sub(" ", text))


def holds_a_link(text: str) -> bool:
    """Whether `text` has a bare URL or domain that gate 2 would check."""
    return bool(_bare_links(text))


def without_unknown_links(text: str, known: str) -> str:
    """`text` without the links `known` (the extracts, their URLs, the bot's texts, the links tools
    returned) does not hold: a Markdown link becomes its label, a sentence with a bare one goes."""
    found = [_url_key(m.group(0)) for m in _BARE_URL.finditer(known)]
    # A known URL's host is known too: "sign in at acme.com" where an extract links https://acme.com/login.
    known_keys = {*found, *(key.split("/", 1)[0] for key in found)}

    def known_url(url: str) -> bool:
        return bool(url) and _url_key(url) in known_keys

    def link(match: re.Match[str]) -> str:
        label, url = match.group(1), match.group(2)
        return match.group(0) if known_url(url) else label

    out = MARKDOWN_LINK.sub(link, text)
    if out == text and not holds_a_link(text):
        return text
    return keep_sentences(out, lambda sentence: all(known_url(url) for url in _bare_links(sentence)))
