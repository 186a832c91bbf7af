"""`gateway chat`'s conversation loop: read a line, print the bot's reply and its sources; and, between
turns, what else arrives in the conversation: an operator's replies and the handoff's notices (a
person joined, nobody is free yet, the bot is back), which answer no line typed here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Awaitable, Callable

from gateway.observability.logs import printable

Ask = Callable[[str], Awaitable[dict]]
Follow = Callable[[int], Awaitable[list[dict]]]
"""The conversation's messages after an id, oldest first (the transcript route's `messages`)."""

FOLLOW_EVERY_S = 1.0


async def converse(bot: str, ask: Ask, follow: Follow | None = None, *,
                   read_line: Callable[[str], str] | None = None) -> int:
    """The terminal loop, until an empty line or end of input. `read_line(prompt)` reads a line, as `input`
    does (default: standard input's, `StdinLines`)."""
    read_line = read_line or StdinLines()
    print(f"Chatting with {bot!r}. Empty line or Ctrl-D to quit.")
    seen = _Seen()
    follower = asyncio.create_task(_follow(bot, follow, seen)) if follow is not None else None
    try:
        while True:
            try:
                text = await _read_line(read_line, "you> ")
            except EOFError:  # Ctrl-D echoes nothing: end the prompt's line, or the shell's prompt follows it
                print()
                break
            except asyncio.CancelledError:  # Ctrl-C at the prompt: the same
                print()
                raise
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


class StdinLines:
    """`input()` for the chat, reading file descriptor 0 itself: `sys.stdin`'s buffer holds a lock while it
    waits, and a read still waiting as the interpreter ended (Ctrl-C at the prompt) was a fatal error."""

    def __init__(self) -> None:
        self._pending = b""

    def __call__(self, prompt: str) -> str:
        print(prompt, end="", flush=True)
        while b"\n" not in self._pending:
            chunk = os.read(0, 4096)
            if not chunk and not self._pending:
                raise EOFError
            if not chunk:
                break
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(sys.stdin.encoding or "utf-8", errors="replace").removesuffix("\r")


async def _read_line(read_line: Callable[[str], str], prompt: str) -> str:
    """`read_line(prompt)` in a daemon thread. In asyncio's default executor, as `asyncio.to_thread` ran
    it, asyncio.run waited for it as it ended: Ctrl-C at the prompt hung until the user pressed Enter."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()

    def settle(text: str, error: BaseException | None) -> None:
        if line.done():  # cancelled meanwhile (Ctrl-C): nobody waits for the line any more
            return
        if error is not None:
            line.set_exception(error)
        else:
            line.set_result(text)

    def read() -> None:
        text, error = "", None
        try:
            text = read_line(prompt)
        except BaseException as exc:  # EOFError (Ctrl-D) is the caller's to handle
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: the chat ended without this line
            loop.call_soon_threadsafe(settle, text, error)

    threading.Thread(target=read, name="chat-input", daemon=True).start()
    return await line


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
