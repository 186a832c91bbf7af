"""The channel's typing indicator, shown while the pipeline answers."""

from __future__ import annotations

import asyncio

import structlog

from gateway.models import ConversationRef
from storage.models import Conversation

log = structlog.get_logger("gateway.worker")

TYPING_REFRESH_S = 4.0  # Telegram's indicator lasts 5 s, Discord's 10 s


def start_typing(adapter: object, conversation: Conversation, *, refresh_s: float = TYPING_REFRESH_S) -> asyncio.Task | None:
    """A task that shows the indicator every `refresh_s` until cancelled, or None when the channel has
    no indicator or a person is handling the conversation."""
    send_typing = getattr(adapter, "send_typing", None)
    if send_typing is None or not adapter.capabilities.typing or conversation.state != "bot":  # type: ignore[attr-defined]
        return None
    ref = ConversationRef(channel=conversation.channel, workspace=conversation.workspace,
                          chat=conversation.chat, thread=conversation.thread)

    async def keep_typing() -> None:
        while True:
            try:
                await send_typing(ref)
            except Exception as exc:  # best effort: an indicator must never fail the answer
                log.warning("typing.failed", conversation_id=conversation.id, error=str(exc)[:200])
                return
            await asyncio.sleep(refresh_s)

    return asyncio.create_task(keep_typing(), name=f"typing-{conversation.id}")
