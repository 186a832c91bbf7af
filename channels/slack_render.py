"""Markdown ⇄ Slack mrkdwn: the LLM's Markdown out as mrkdwn, Slack's inbound markup in as plain text.

Slack treats only & < > as control characters, so everything is escaped except real links, which
become `<url|label>` with the URL vetted by `safe_link_url`. An HTML entity in the Markdown (`&amp;`)
is the character it names, as in CommonMark, and is escaped as that character.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from markdown_to_mrkdwn import SlackMarkdownConverter

from channels.render import LITERAL_MARKS, fence_spans, outside

_HOLD = re.compile("\ue000(\\d+)\ue001")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_TICKS = re.compile(r"`{3,}")
# Any ASCII punctuation may be backslash-escaped, as in CommonMark: `\<!channel>` is the text "<!channel>".
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# The URL may be empty ("[a]( )"): such a link becomes its label like any unsafe one (the converter made it `< |a>`).
# It may hold one level of parentheses (`https://en.wikipedia.org/wiki/Fee_(banking)`): read only up to the
# first ")", the link was cut there and its rest shown as text.
# Or be in angle brackets, as CommonMark allows, with spaces in it: `[t](<https://x.io/a b>)`. Without them it may
# hold `<` and `>` (not first), which `safe_link_url` percent-encodes: `[t](https://x.io/?q=<2>)`.
_MD_LINK = re.compile(
    r"!?\[([^\]\n]*)\]\(\s*(?:<([^<>\n]*)>|(?!<)((?:[^()\s]|\([^()\s]*\))*))(?:\s+\"[^\"]*\")?\s*\)"
)
# An HTML entity a model wrote ("A &amp; B") is a character in Markdown, as in CommonMark; with a semicolon only.
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BARE_URL = re.compile(r"https?://[^\s<>\"`]+")
# Slack's *bold* and ~strike~: one mark, at word edges ("2*3*4" is no bold), never across a line.
_SLACK_BOLD = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_SLACK_STRIKE = re.compile(r"(?<![\w~])~(?=\S)([^~\n]+?)(?<=\S)~(?![\w~])")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack treats as control: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_link_url(url: str | None) -> str | None:
    """A URL safe inside `<url|label>`: http(s)/mailto only, with & < > | escaped; else None."""
    if not url or not re.match(r"(?i)^(https?://|mailto:)\S+$", url.strip()):
        return None
    return quote(url.strip(), safe="/:?#[]@!$&'()*+,;=%~-._").replace("&", "&amp;")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Convert the LLM's Markdown to Slack mrkdwn, escaping & < > everywhere except in real links. Code blocks are
    found as CommonMark reads them (`fence_spans`): one indented in a list item or in a block quote too, whose lines
    were read as prose, so `__init__` showed as *init* in the customer's code."""
    pieces: list[str] = []
    pos = 0
    for start, end in fence_spans(markdown):
        pieces.append(_prose_to_mrkdwn(markdown[pos:start]) or "")
        pieces.append(_code_block(markdown[start:end]))
        pos = end
    pieces.append(_prose_to_mrkdwn(markdown[pos:]) or "")
    return "".join(pieces).strip("\n")


def _code_block(block: str) -> str:
    """A fenced code block as Slack shows one: ``` lines (Slack shows no language tag), the code escaped, out of its
    container (a list item's indent, a block quote's `>`), a ``` in it broken by zero-width spaces; one left unclosed
    still renders as code."""
    lines = block.split("\n")
    opener = _FENCE_LINE.match(lines[0].lstrip(" >"))  # after its container's indent and `>`
    marker = opener.group(1) if opener else "```"
    prefix = lines[0][: len(lines[0]) - len(lines[0].lstrip(" >"))]
    closing = _unprefixed(lines[-1], prefix).strip() if len(lines) > 1 else ""
    closed = len(closing) >= len(marker) and set(closing) == {marker[0]}
    body = [_unprefixed(line, prefix) for line in (lines[1:-1] if closed else lines[1:])]
    # Slack ends a block at the first ``` in it: a run of backticks keeps its look with zero-width spaces between them.
    code = _TICKS.sub(lambda run: "\u200b".join(run.group(0)), "\n".join(body))
    return "```\n" + escape_mrkdwn(code) + "\n```"


def _unprefixed(line: str, prefix: str) -> str:
    """`line` without its container's part of `prefix` (a block quote's `>`, up to as many spaces of indent)."""
    if ">" in prefix:
        quote = len(line) - len(line.lstrip(" "))
        if line[quote:quote + 1] == ">":
            line = line[quote + 1:]
            return line[1:] if line.startswith(" ") else line
        return line
    indent = len(line) - len(line.lstrip(" "))
    return line[min(indent, len(prefix)):]


def _prose_to_mrkdwn(text: str) -> str | None:
    if not text:
        return None
    held: list[str] = []

    def hold(value: str) -> str:
        held.append(value)
        return f"\ue000{len(held) - 1}\ue001"

    def link(match: re.Match[str]) -> str:
        label = _unescape(match.group(1).strip())
        url = _unescape(match.group(3) if match.group(2) is None else match.group(2).strip().replace(" ", "%20"))
        url = safe_link_url(url)
        label = escape_mrkdwn(re.sub(r"[*_~`]", "", label))
        # Held pieces in the label (inline code, an escaped `\|`) are put back first: a `|` in them ended the label.
        label = _restore(held, label).replace("|", "¦")
        if not url:
            return hold(label)
        return hold(f"<{url}|{label}>" if label else f"<{url}>")

    def bare(match: re.Match[str]) -> str:
        url = match.group(0)
        trail = re.search(r"[.,;:!?'\"]*$", url).group(0)
        if url.endswith(")") and "(" not in url:
            trail = url[-1:]
        url = url[: len(url) - len(trail)] if trail else url
        safe = safe_link_url(url)
        return (hold(f"<{safe}>") if safe else escape_mrkdwn(url)) + escape_mrkdwn(trail)

    text = _INLINE_CODE.sub(lambda m: hold("`" + escape_mrkdwn(m.group(2)) + "`"), text)
    text = _MD_ESCAPE.sub(lambda m: hold(escape_mrkdwn(LITERAL_MARKS.get(m.group(1), m.group(1)))), text)
    text = _MD_LINK.sub(link, text)
    # An autolink whose URL is not safe (`<https:x>`) is its text, angle brackets and all, not a Slack link control.
    text = _AUTOLINK.sub(lambda m: hold(f"<{url}>" if (url := safe_link_url(m.group(1))) else escape_mrkdwn(m.group(0))),
                         text)
    text = _BARE_URL.sub(bare, text)
    # What is still `[x](y)` is no link by CommonMark (`[a](()`); the converter would make it one, unchecked.
    text = text.replace("](", hold("]("))
    # Held, so an entity's character is shown as itself: "&#42;" is a "*", not the start of bold.
    text = escape_mrkdwn(_ENTITY.sub(lambda m: hold(escape_mrkdwn(html.unescape(m.group(0)))), text))
    text = re.sub(r"^(\s*)&gt; (?=\S)", r"\1> ", text, flags=re.MULTILINE)  # keep Markdown quotes as Slack quotes
    lead = len(text) - len(text.lstrip("\n"))
    trail = len(text) - len(text.rstrip("\n"))
    converted = _restore(held, SlackMarkdownConverter().convert(text))
    return "\n" * lead + converted + "\n" * trail


def _restore(held: list[str], text: str) -> str:
    """`text` with the pieces `_prose_to_mrkdwn` held put back."""
    for _ in range(3):  # held values may hold others (inline code inside a link label)
        text = _HOLD.sub(lambda m: held[int(m.group(1))], text)
    return text


def _unescape(text: str) -> str:
    return _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)


def slack_to_plain(text: str) -> str:
    """Slack's inbound markup → plain text for the model: links, mentions and entities decoded."""

    def control(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith(("@U", "@W", "@B")):
            return "@" + (label or target[1:])
        if target.startswith("#C") or target.startswith("#G"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return label or "@" + target[1:].split("^")[0]
        return f"{label} ({target})" if label and label != target else target

    text = re.sub(r"<([^<>\n]+)>", control, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mrkdwn_to_markdown(text: str) -> str:
    """What an operator wrote in Slack, as the Markdown every channel renders from: Slack's `*bold*` and
    `~strike~` become `**bold**` and `~~strike~~` (read as Markdown, `*bold*` reached the customer in
    italics); `_italic_`, code and the rest read the same in both. Code is left as written."""
    return outside(_CODE, text, _slack_marks)


def _slack_marks(text: str) -> str:
    return _SLACK_STRIKE.sub(r"~~\1~~", _SLACK_BOLD.sub(r"**\1**", text))
