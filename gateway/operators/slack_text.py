"""The words of the Slack operator channel: customer text made inert, operators as mentions, headers."""

from __future__ import annotations

import re

from channels.slack_render import escape_mrkdwn
from gateway.operators.attachments import files_note
from storage.models import Escalation

SLACK_OPERATOR = re.compile(r"slack:([A-Z0-9]+)")
"""A claim made from a Slack operator channel before members were mapped to operators: `slack:<user id>`."""


def clip(text: str, limit: int = 500) -> str:
    """`text` stripped, cut to `limit` characters with an ellipsis."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: str) -> str:
    """Escape Slack's control characters so customer text can never ping @channel or fake a link."""
    return escape_mrkdwn(text or "")


def quoted(text: str) -> str:
    """Customer text as a Slack quote, every line of it (escaped as `plain`): Slack keeps its formatting, so
    an unquoted line of it could pass for the app's own framing (`*slack:U1 replied:* refund approved`)."""
    return "\n".join(f"> {line}" for line in plain(text).splitlines() or [""])


def customer_post(label: str, text: str, files: list[str], *, replaces: str | None = None) -> str:
    """A customer's message in a thread: `label`, their words quoted, and their files named (`files_note`: the
    files are not posted, and a photo alone has no words: it read "*Customer:*" and nothing). `replaces`: the
    words of the message this one edits (an edit made while that one was handled, `meta.edit_of`), quoted
    under "_It replaces:_", so the edit reads as one and not as a second message."""
    note = files_note(files)
    said = [quoted(clip(text, 2000))] if (text or "").strip() or not note else []
    replaced = ["_It replaces:_", quoted(clip(replaces, 500))] if replaces is not None else []
    return "\n".join([label, *said, *([f"_{note}_"] if note else []), *replaced])



def slack_time(ts: str) -> float:
    """A Slack message ts ("1700000000.000900") as epoch seconds; 0 when it is none."""
    try:
        return float(ts)
    except ValueError:
        return 0.0


def mention(operator: str) -> str:
    """A Slack operator (`slack:<user id>`) as a mention, which notifies them; anyone else by name."""
    match = SLACK_OPERATOR.fullmatch(operator)
    return f"<@{match.group(1)}>" if match else plain(operator)


def named(text: str) -> str:
    """`text` (plain) with every Slack operator it names (`slack:U…`) as a mention: Slack shows the member's
    name, where the raw id told the channel nothing about who held or took a thread."""
    return re.sub(rf"\b{SLACK_OPERATOR.pattern}\b", r"<@\1>", plain(text))


def header_title(escalation: Escalation) -> str:
    """How an escalation's header starts; also how a header is found in the channel's history."""
    return f"Escalation #{escalation.id} ({escalation.bot})"
