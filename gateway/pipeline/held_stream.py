"""Streaming that shows nothing gate 2 would throw away: tokens are held until the text cites.

Gate 2 replaces an answer without a valid citation by the fallback text. Streamed as it came, such
an answer (an uncited claim, or text written under a prompt injection) was shown word by word and
only then replaced. So the tokens of one model call are held until the text so far holds a marker
[n] of an extract the model was given; then everything held goes out at once and the rest streams
as it comes. A refusal or an uncited answer is never streamed: the final reply shows it whole. The
cost is that the first sentence appears at once rather than word by word.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

TokenCallback = Callable[[str], Awaitable[None]]
_MARKER = re.compile(r"\[\s*(\d{1,4})(?:\s*,\s*\d{1,4})*\s*\]")


class HeldStream:
    """Wraps `on_token` for one model call that was given `extracts` numbered extracts."""

    def __init__(self, on_token: TokenCallback, *, extracts: int) -> None:
        self._on_token = on_token
        self._extracts = extracts
        self._held: list[str] = []
        self._released = False

    async def __call__(self, token: str) -> None:
        if self._released:
            await self._on_token(token)
            return
        self._held.append(token)
        text = "".join(self._held)
        if any(1 <= int(m.group(1)) <= self._extracts for m in _MARKER.finditer(text)):
            self._released = True
            self._held.clear()
            await self._on_token(text)
