"""Text as both stores can hold it. One rule for every writer: inbound messages, documents, run errors."""

from __future__ import annotations

import re

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` without NUL (valid in JSON strings, refused by PostgreSQL text) and with each lone
    surrogate ("\\ud800" is valid JSON, and a file name that is not UTF-8 decodes to some; neither
    has a UTF-8 form) made U+FFFD."""
    if not _UNSTORABLE.search(text):
        return text
    return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)
