"""Text as both stores can hold it. One rule for every writer: inbound messages, documents, run errors."""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` without NUL (valid in JSON strings, refused by PostgreSQL text) and with each lone
    surrogate ("\\ud800" is valid JSON, and a file name that is not UTF-8 decodes to some; neither
    has a UTF-8 form) made U+FFFD. A pair of surrogates is joined into its character: a model that
    streams an emoji as two JSON escapes, one a chunk, gives its two halves."""
    if not _UNSTORABLE.search(text):
        return text
    text = text.replace("\x00", "")
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def storable_json(value: Any) -> Any:
    """`value` (a JSON-able structure: a tool's arguments and result, citations) with `storable_text`
    applied to every string in it, keys included: PostgreSQL's jsonb refuses NUL as its text does."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_json(k): storable_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_json(v) for v in value]
    return value
