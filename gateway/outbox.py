"""The outbox: replies are stored first, then sent through their channel and marked sent or failed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import structlog
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from channels.base import ChannelAdapter
from gateway.errors import ChannelError, ChannelSendError, RecipientUnreachable
from gateway.events import EventBus, conversation_topic
from gateway.models import Citation, ConversationRef, OutboundMessage, utcnow
from storage.models import Conversation, Delivery, Message

log = structlog.get_logger("gateway.outbox")


class Outbox:
    """Sends stored replies. `adapters` maps (bot, channel) to the adapter that delivers there."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, adapters: Mapping[tuple[str, str], ChannelAdapter],
                 bus: EventBus, metrics=None) -> None:
        self._sessions = sessions
        self._adapters = adapters
        self._bus = bus
        self._metrics = metrics

    async def deliver(self, message_id: int) -> str:
        """Send one pending reply; returns its final status. Safe to call twice: only one caller sends."""
        async with self._sessions() as session, session.begin():
            claimed = await session.execute(
                update(Message).where(Message.id == message_id, Message.status == "pending")
                .values(status="sending", attempts=Message.attempts + 1, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if claimed.rowcount != 1:
                return "skipped"
            message = await session.get(Message, message_id)
            conversation = await session.get(Conversation, message.conversation_id)
            inbound = await session.get(Message, message.reply_to_id) if message.reply_to_id else None
        bound = log.bind(message_id=message.id, conversation_id=conversation.id, bot=message.bot,
                         channel=message.channel)
        adapter = self._adapters.get((message.bot, message.channel))
        status, error, provider_ids = "sent", None, []
        if adapter is None:
            status, error = "failed", f"channel {message.channel!r} is not enabled for bot {message.bot!r}"
        else:
            outbound = OutboundMessage(
                conversation=ConversationRef(channel=conversation.channel, workspace=conversation.workspace,
                                             chat=conversation.chat, thread=conversation.thread),
                text=message.text,
                reply_to=(inbound.meta or {}).get("platform_message_id") if inbound is not None else None,
                citations=tuple(Citation(source=c.get("source", ""), title=c.get("title", ""), url=c.get("url"))
                                for c in message.citations or []),
            )
            try:
                provider_ids = list(await adapter.send(outbound))
            except RecipientUnreachable as exc:
                status, error = "failed", f"recipient unreachable: {exc}"
            except ChannelSendError as exc:
                status, error = "failed", f"send failed: {exc}"
            except ChannelError as exc:
                status, error = "failed", f"channel error: {exc}"
            except Exception as exc:  # an adapter bug must not leave the reply in limbo
                bound.exception("outbound.adapter_crashed")
                status, error = "failed", f"adapter error: {type(exc).__name__}"
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(Message).where(Message.id == message_id).values(
                    status=status, error=error, provider_ids=provider_ids, updated_at=utcnow(),
                    sent_at=utcnow() if status == "sent" else None,
                ).execution_options(synchronize_session=False)
            )
            for provider_id in dict.fromkeys(str(p) for p in provider_ids):
                session.add(Delivery(message_id=message_id, channel=message.channel, provider_id=provider_id))
        if status == "sent":
            bound.info("outbound.sent", provider_ids=provider_ids)
        else:
            bound.warning("outbound.failed", error=error)
        if self._metrics:
            self._metrics.message_out(bot=message.bot, channel=message.channel, status=status)
        self._bus.publish(conversation_topic(conversation.id), {"type": "message", "status": status})
        return status

    async def recover(self, *, older_than_s: float = 120.0) -> int:
        """Requeue replies left in `sending` by a crash.

        Delivery is at-least-once only for this window: a process killed after the platform accepted
        the send but before we recorded it may send that one reply again.
        """
        async with self._sessions() as session, session.begin():
            result = await session.execute(
                update(Message).where(Message.direction == "out", Message.status == "sending",
                                      Message.updated_at < utcnow() - timedelta(seconds=older_than_s))
                .values(status="pending").execution_options(synchronize_session=False)
            )
        if result.rowcount:
            log.warning("outbound.requeued_after_crash", count=result.rowcount)
        return result.rowcount
