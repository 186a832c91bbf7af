"""Streaming that shows nothing gate 2 would throw away: tokens are held until the text cites.

Gate 2 replaces an answer without a valid citation by the fallback text. Streamed as it came, such
an answer (an uncited claim, or text written under a prompt injection) was shown word by word and
only then replaced. So the tokens of one model call are held until the text so far holds a marker
[n] of an extract the model was given; then everything held goes out at once and the rest streams
as it comes. A refusal or an uncited answer is never streamed: the final reply shows it whole. The
cost is that the first sentence appears at once rather than word by word.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.pipeline.citations import cites_an_extract

TokenCallback = Callable[[str], Awaitable[None]]
MARKER_REACH = 40
"""How much of the held text a new token is searched with: a marker may span tokens ("[1" then "]"),
and a list ("[1, 2, 3]") is longer than one."""


class HeldStream:
    """Wraps `on_token` for one model call that was given `extracts` numbered extracts."""

    def __init__(self, on_token: TokenCallback, *, extracts: int) -> None:
        self._on_token = on_token
        self._extracts = extracts
        self._held: list[str] = []
        self._tail = ""  # the end of the held text, where a marker the next token completes begins
        self._released = False

    async def __call__(self, token: str) -> None:
        if self._released:
            await self._on_token(token)
            return
        # Only the tail and the new token are searched: an answer that never cites costs linear time.
        self._held.append(token)
        window = self._tail + token
        if cites_an_extract(window, count=self._extracts):
            self._released = True
            held, self._held = "".join(self._held), []
            await self._on_token(held)
            return
        self._tail = window[-MARKER_REACH:]
