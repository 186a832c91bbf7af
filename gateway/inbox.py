"""The durable inbox: every inbound message is stored before its webhook or API call returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway import otel
from gateway.models import InboundMessage
from gateway.pg_bridge import announce
from storage import repositories as repo

log = structlog.get_logger("gateway.inbox")


def without_nul(message: InboundMessage) -> InboundMessage:
    """NUL is valid in JSON strings but PostgreSQL text refuses it: drop it from what we store."""
    if "\x00" not in message.text and "\x00" not in message.sender.display_name:
        return message
    sender = dataclasses.replace(message.sender, display_name=message.sender.display_name.replace("\x00", ""))
    return dataclasses.replace(message, text=message.text.replace("\x00", ""), sender=sender)


@dataclass(frozen=True, slots=True)
class Accepted:
    """What the caller needs to acknowledge, and to wait for the answer if it wants to."""

    message_id: int
    conversation_id: int
    duplicate: bool


class Inbox:
    """Stores inbound messages idempotently and wakes the worker."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, on_stored=None) -> None:
        self._sessions = sessions
        self._on_stored = on_stored

    async def accept(self, bot: str, message: InboundMessage) -> Accepted:
        """Store `message` for `bot` once; a repeated delivery is acknowledged but not stored again."""
        message = without_nul(message)  # every entry point (webhooks, polling, sockets, gateway) passes here
        async with self._sessions() as session, session.begin():
            stored = await repo.store_inbound(session, bot=bot, message=message,
                                              traceparent=otel.current_traceparent())
            if not stored.duplicate:
                await announce(session)  # wakes workers in other processes when this commits
        log.info("inbound.duplicate" if stored.duplicate else "inbound.stored", bot=bot, channel=message.channel,
                 external_id=message.external_id, message_id=stored.message_id,
                 conversation_id=stored.conversation_id)
        if not stored.duplicate and self._on_stored is not None:
            self._on_stored(stored.conversation_id)
        return Accepted(message_id=stored.message_id, conversation_id=stored.conversation_id,
                        duplicate=stored.duplicate)
