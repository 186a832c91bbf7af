"""Streaming that shows nothing gate 2 would throw away: tokens are held until the text cites.

Gate 2 replaces an answer without a valid citation by the fallback text. Streamed as it came, such
an answer (an uncited claim, or text written under a prompt injection) was shown word by word and
only then replaced. So the tokens of one model call are held until the text so far holds a marker
[n] of an extract the model was given. A refusal or an uncited answer is never streamed: the final
reply shows it whole.

From then on, text goes out a whole sentence at a time, since gate 2 judges sentences: one whose every
marker names no extract ("… a free phone [7].") is dropped, as gate 2 drops it, and once the text
holds a link (a bare domain too) or begins to repeat the prompt (`PromptEcho.begun_in`) nothing more
of the call is streamed. The last sentence goes out when the
call ends (`finish`). The cost is that the answer appears a sentence at a time, not word by word.

What goes out is rewritten as gate 2 rewrites the final reply, so the streamed text and the reply
read the same: the first document cited is [1], the next new one [2] (the model's [3] then [1]
stream as [1] then [2]), and markers of extracts the model was not given are dropped. A piece is
rewritten only once nothing after it can change it: trailing spaces, a marker not yet closed ("[1"),
and a " ." that gate 2 may join to the word before it wait for the next token.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

from gateway.pipeline.citations import (
    CitationNumbers,
    PromptEcho,
    cites_an_extract,
    number_markers,
    without_fallback_tags,
    without_invented_claims,
)
from gateway.pipeline.links import holds_a_link
from gateway.pipeline.prompts import Hit
from gateway.pipeline.sentences import BOUNDARY, NOT_AN_END_BEFORE

TokenCallback = Callable[[str], Awaitable[None]]
MARKER_REACH = 40
"""How much of the held text a new token is searched with: a marker may span tokens ("[1" then "]"),
and a list ("[1, 2, 3]") is longer than one."""
# No part can match the same characters as its neighbour (a marker inside the repeat is closed, an
# open one cannot end in whitespace), so a failing match backtracks linearly, not exponentially.
_UNSETTLED = re.compile(
    r"(?:[ \t]+[.,;:!?]+(?:\s*\[[\d\s,]*\])*)?(?:\s*(?:\[[\d,]*(?:\s+[\d,]+)*|<[^<>]{0,20}))?\s*$")
"""The end of the text that the next token may still change: a " ." waiting to see what follows it
(markers after it may yet be removed), an open marker or `<fallback>` tag, and trailing whitespace
(a marker's leading spaces go with it)."""
UNSETTLED_REACH = 80
"""How far back the unsettled end is looked for: what lies before it is released, so the text held
(and searched on every token) stays this short even when a model streams a long run of spaces."""
_LAST_MARKER = re.compile(r"\[\d+\]$")
_LINK_START = re.compile(r"https?:|www\.|\]\(", re.IGNORECASE)
"""Where a link begins. Gate 2 takes out a link no extract or tool holds, which the stream cannot know
yet: from the first link on, nothing more of this call is streamed and the final reply shows it whole,
so no made-up payment page is on screen, even for a moment."""
LINK_REACH = 8
MAX_SENTENCE_CHARS = 1500
"""A sentence held longer than this without ending stops the stream (the final reply shows the rest):
what is held is searched on every token, so it must stay short."""
ECHO_REACH = 1000
"""How much of the text shown is kept to look for the prompt in: longer than any rules line."""


class HeldStream:
    """Wraps `on_token` for one model call that was given `extracts` numbered extracts. With `hits`,
    extracts of one document share a number, as in the final reply. `echo`: the bot's system prompt,
    which the stream must not repeat (`PromptEcho.of`)."""

    def __init__(self, on_token: TokenCallback, *, extracts: int, hits: Sequence[Hit] | None = None,
                 echo: PromptEcho | None = None) -> None:
        self._on_token = on_token
        self._echo = echo or PromptEcho()
        self._said = ""  # the end of the text released so far, to look for the prompt in
        self._received: list[str] = []  # every token, to tell whether the call's text is what streamed
        self._looked = 0  # how far `_pending` was searched for sentence ends
        self._sentence_ends: list[int] = []  # where the whole sentences in `_pending` end
        self._extracts = extracts
        self._numbers = CitationNumbers.for_hits(hits) if hits is not None else CitationNumbers(range(extracts))
        self._held: list[str] = []
        self._tail = ""  # the end of the held text, where a marker the next token completes begins
        self._released = False
        self._pending = ""  # released text the next token may still change
        self._shown = False
        self._last_marker = ""  # the marker the shown text ends with: gate 2 drops a repeat right after it
        self._shown_tail = ""  # the end of what was shown, where a link the next token completes begins
        self._stopped = False  # a link came: the rest waits for the final reply (`_LINK_START`)

    async def __call__(self, token: str) -> None:
        self._received.append(token)
        if self._stopped:
            return
        if self._released:
            self._pending += token
            await self._show_settled()
            return
        # Only the tail and the new token are searched: an answer that never cites costs linear time.
        self._held.append(token)
        window = self._tail + token
        if cites_an_extract(window, count=self._extracts):
            self._released = True
            self._pending, self._held = "".join(self._held), []
            await self._show_settled()
            return
        self._tail = window[-MARKER_REACH:]

    @property
    def shown(self) -> bool:
        """Whether anything of this call went out."""
        return self._shown

    async def finish(self, text: str) -> None:
        """The call ended with `text` and no tool call: when that is what streamed, its last sentence,
        complete now, goes out too (after a broken stream the text is a retry's, which never streams)."""
        if self._released and not self._stopped and "".join(self._received) == text:
            await self._show_settled(ended=True)

    async def _show_settled(self, *, ended: bool = False) -> None:
        if _LINK_START.search(self._shown_tail + self._pending):
            self._stopped, self._pending = True, ""
            return
        # A whole tag goes first, as in gate 2: cut out of the middle of a piece it would leave a double space.
        self._pending = without_fallback_tags(self._pending)
        if ended:
            self._pending = self._pending.rstrip()
            cut = len(self._pending)
        else:
            unsettled = _UNSETTLED.search(self._pending, max(0, len(self._pending) - UNSETTLED_REACH)).start()
            cut = self._sentence_end_before(unsettled)
        if cut == 0:
            if len(self._pending) > MAX_SENTENCE_CHARS:
                self._stopped, self._pending = True, ""
            return
        sentences, self._pending = self._pending[:cut], self._pending[cut:]
        if holds_a_link(sentences):  # a bare domain too ("acme-billing.com/pay"), which `_LINK_START` cannot tell
            self._stopped, self._pending = True, ""
            return
        self._looked = max(0, self._looked - cut)
        self._sentence_ends = [end - cut for end in self._sentence_ends if end > cut]
        self._said = (self._said + sentences)[-ECHO_REACH:]
        if self._echo.begun_in(self._said):  # stopping costs only the rest of the stream
            self._stopped, self._pending = True, ""
            return
        lead = sentences[: len(sentences) - len(sentences.lstrip())]
        kept = without_invented_claims(sentences.lstrip(), count=self._extracts)
        if not kept:
            return
        piece = number_markers(lead + kept, self._numbers)
        if self._last_marker:  # "[1] [1]" reads as a stutter, also when the two came in different pieces
            piece = re.sub(rf"^(?:\s*{re.escape(self._last_marker)})+", "", piece)
        if not self._shown:
            piece = piece.lstrip()  # the final reply is stripped
        if not piece:
            return
        self._shown = True
        self._shown_tail = (self._shown_tail + piece)[-LINK_REACH:]
        ends_with = _LAST_MARKER.search(piece)
        self._last_marker = ends_with.group(0) if ends_with else ""
        await self._on_token(piece)

    def _sentence_end_before(self, limit: int) -> int:
        """Where the last whole sentence held that ends by `limit` ends: the start of the whitespace after
        it; 0 if none. Only what came since the last look is searched (a sentence end's match starts at
        its first space, so it is found when that space comes)."""
        for match in BOUNDARY.finditer(self._pending, self._looked):
            if "\n" in match.group(0) or not NOT_AN_END_BEFORE.search(self._pending, max(0, match.start() - 12),
                                                                    match.start()):
                self._sentence_ends.append(match.start())
        self._looked = len(self._pending)
        return max((end for end in self._sentence_ends if end <= limit), default=0)
