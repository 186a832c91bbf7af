"""What operators are told of the files a customer sent (a photo, a voice note, a PDF).

The gateway keeps only their metadata (`messages.attachments`), and a photo alone is stored with empty text:
without this the console showed an empty message and the Slack thread "*Customer:*" with nothing under it.
Operators get each file's kind (and its MIME type), never its `file_id` or URL, which only the bot's own
credentials open. A shared location or contact card is left out: its words are in the message's text already.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from channels.whatsapp_media import VCARD_TYPES

_IN_THE_TEXT = frozenset({"location", "contact"})  # written into the text by the channel (`shared_content`)


def _files(attachments: Iterable[Any] | None) -> list[dict[str, Any]]:
    return [a for a in attachments or () if isinstance(a, dict) and a.get("kind") not in _IN_THE_TEXT
            and a.get("mime_type") not in VCARD_TYPES]


def shown(attachments: Iterable[Any] | None) -> list[dict[str, str]]:
    """The files of a message as the operator API gives them: `kind`, and `mime_type` when known."""
    return [{"kind": str(a.get("kind") or "other"), **({"mime_type": str(a["mime_type"])} if a.get("mime_type") else {})}
            for a in _files(attachments)]


def kinds(attachments: Iterable[Any] | None) -> list[str]:
    """The kind of each file of a message (`image`, `audio`, `document`, …), in order."""
    return [str(a.get("kind") or "other") for a in _files(attachments)]


def files_note(kinds_sent: list[str]) -> str:
    """What an operator reads for the customer's files: `sent a file (image), not shown here`; "" for none."""
    if not kinds_sent:
        return ""
    if len(kinds_sent) == 1:
        return f"sent a file ({kinds_sent[0]}), not shown here"
    return f"sent {len(kinds_sent)} files ({', '.join(dict.fromkeys(kinds_sent))}), not shown here"
