"""`gateway chat`'s conversation loop: read a line, print the bot's reply and its sources; and, between
turns, what else arrives in the conversation: an operator's replies and the handoff's notices (a
person joined, nobody is free yet, the bot is back), which answer no line typed here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from gateway.observability.logs import printable

Ask = Callable[[str], Awaitable[dict]]
Follow = Callable[[int], Awaitable[list[dict]]]
"""The conversation's messages after an id, oldest first (the transcript route's `messages`)."""

FOLLOW_EVERY_S = 1.0


async def converse(bot: str, ask: Ask, follow: Follow | None = None) -> int:
    """The terminal loop, until an empty line or end of input."""
    print(f"Chatting with {bot!r}. Empty line or Ctrl-D to quit.")
    seen = _Seen()
    follower = asyncio.create_task(_follow(bot, follow, seen)) if follow is not None else None
    try:
        while True:
            try:
                text = await asyncio.to_thread(input, "you> ")
            except EOFError:  # Ctrl-D echoes nothing: end the prompt's line, or the shell's prompt follows it
                print()
                break
            if not text.strip():
                break
            async with seen.turn:  # the turn's own replies are printed here, not by the follower
                reply = await ask(text)
                if follow is not None:
                    await seen.skip_turn(follow, bot)
            shown = reply["reply"] if reply["reply"] is not None else (
                "(still working on it; no answer yet)" if reply.get("pending") else "(a person will reply)")
            print(f"{bot}> {printable(shown)}")
            for i, citation in enumerate(reply["citations"], 1):
                print(f"    [{i}] {printable(citation['title'])} — {printable(citation.get('url') or citation['source'])}")
    finally:
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
    return 0


class _Seen:
    """The newest message id shown or skipped, and the lock a turn holds while its reply comes."""

    def __init__(self) -> None:
        self.last = 0
        self.turn = asyncio.Lock()

    async def skip_turn(self, follow: Follow, bot: str) -> None:
        """Past the turn's messages (the question, the replies `ask` returned); an operator's reply that
        came meanwhile is still shown."""
        for message in await follow(self.last):
            self.last = max(self.last, message["id"])
            if message["direction"] == "out" and message["author"] == "operator":
                _show(bot, message)


async def _follow(bot: str, follow: Follow, seen: _Seen) -> None:
    while True:
        await asyncio.sleep(FOLLOW_EVERY_S)
        async with seen.turn:
            try:
                messages = await follow(seen.last)
            except Exception:  # the server restarting, say: the next round tries again
                continue
            for message in messages:
                seen.last = max(seen.last, message["id"])
                if message["direction"] == "out":
                    _show(bot, message)
                    print("you> ", end="", flush=True)


def _show(bot: str, message: dict) -> None:
    who = "a person" if message["author"] == "operator" else bot
    print(f"\r{who}> {printable(message['text'])}")
