"""The channel's typing indicator, shown while the pipeline answers, and while a burst waits for more."""

from __future__ import annotations

import asyncio
import time

import structlog

from gateway.background import cancel
from gateway.models import ConversationRef
from storage.models import Conversation

log = structlog.get_logger("gateway.worker")

TYPING_REFRESH_S = 4.0  # Telegram's indicator lasts 5 s, Discord's 10 s
TYPING_TIMEOUT_S = 5.0
"""The longest a platform is waited for to show the indicator: one shown later has nearly lapsed anyway."""


def _sender(adapter: object, conversation: Conversation):
    """The adapter's `send_typing` bound to the conversation, or None when no indicator is shown: the
    channel has none, or a person is handling the conversation."""
    send_typing = getattr(adapter, "send_typing", None)
    if send_typing is None or not adapter.capabilities.typing or conversation.state != "bot":  # type: ignore[attr-defined]
        return None
    ref = ConversationRef(channel=conversation.channel, workspace=conversation.workspace,
                          chat=conversation.chat, thread=conversation.thread)
    return lambda: send_typing(ref)


async def _show(send, conversation: Conversation, *, timeout_s: float = TYPING_TIMEOUT_S) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            await send()
    except Exception as exc:  # best effort: an indicator must never fail the answer
        log.warning("typing.failed", conversation_id=conversation.id,
                    error=str(exc)[:200] or f"{type(exc).__name__} (after {timeout_s:g} s at most)")
        return False
    return True


def start_typing(adapter: object, conversation: Conversation, *, refresh_s: float = TYPING_REFRESH_S) -> asyncio.Task | None:
    """A task that shows the indicator every `refresh_s` until cancelled, or None when the channel has
    no indicator or a person is handling the conversation."""
    send = _sender(adapter, conversation)
    if send is None:
        return None

    async def keep_typing() -> None:
        while await _show(send, conversation):
            await asyncio.sleep(refresh_s)

    return asyncio.create_task(keep_typing(), name=f"typing-{conversation.id}")


class WaitingIndicator:
    """The indicator while a conversation is parked for its customer to finish typing (a burst): shown
    each time the worker looks at it, at most once every `refresh_s`. Nothing refreshes it between looks,
    so it stops with the wait (`gateway.burst.BURST_MAX_WAIT_S` at most), then the answer's own indicator
    shows. Each showing is a task of its own, bounded by `timeout_s`: awaited in the turn, a platform slow
    to answer held the worker's turn (and the park) until its HTTP timeout. `close` ends those left."""

    _KEPT = 1000  # conversations remembered at most; a forgotten one is only shown the indicator again

    def __init__(self, *, refresh_s: float = TYPING_REFRESH_S, timeout_s: float = TYPING_TIMEOUT_S) -> None:
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._shown: dict[int, float] = {}  # conversation id -> monotonic time it was last shown
        self._showing: set[asyncio.Task] = set()

    def show(self, adapter: object, conversation: Conversation) -> None:
        """Show the indicator, without waiting for the platform, unless it was shown for this
        conversation less than `refresh_s` ago."""
        send = _sender(adapter, conversation)
        now = time.monotonic()
        if send is None or now - self._shown.get(conversation.id, -self.refresh_s) < self.refresh_s:
            return
        if len(self._shown) >= self._KEPT:
            del self._shown[next(iter(self._shown))]
        self._shown[conversation.id] = now
        # A failure is logged by `_show`, once; the task ends with no error left for asyncio to report.
        task = asyncio.create_task(_show(send, conversation, timeout_s=self.timeout_s), name=f"typing-{conversation.id}")
        self._showing.add(task)
        task.add_done_callback(self._showing.discard)

    async def close(self) -> None:
        """End the showings still waiting for their platform (at a stop: none outlives the worker)."""
        await cancel(self._showing)

    def forget(self, conversation_id: int) -> None:
        """The wait is over: the next wait in this conversation shows the indicator at once."""
        self._shown.pop(conversation_id, None)
