"""Escalation to a human operator: the handoff state of a conversation.

States: `bot` → `waiting` (escalated, unclaimed) → `operator` (claimed) → `bot` (resolved).
Transitions are conditional UPDATEs, so under concurrency exactly one actor wins.
"""

from __future__ import annotations

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.events import ESCALATIONS_TOPIC, EventBus
from gateway.models import utcnow
from gateway.settings import Settings
from storage.models import Conversation, Escalation

log = structlog.get_logger("gateway.escalation")


class Escalations:
    """Opens, claims and resolves escalations."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, settings: Settings, bus: EventBus,
                 metrics=None) -> None:
        self._sessions = sessions
        self._settings = settings
        self._bus = bus
        self._metrics = metrics

    async def open_in(self, session: AsyncSession, *, conversation: Conversation, reason: str) -> Escalation:
        """Escalate inside the caller's transaction; an already open escalation is reused."""
        existing = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == conversation.id, Escalation.state.in_(("open", "claimed"))
        ))).scalar_one_or_none()
        if existing is not None:
            return existing
        escalation = Escalation(conversation_id=conversation.id, bot=conversation.bot, state="open",
                                reason=reason[:1000], notes=[], created_at=utcnow())
        session.add(escalation)
        conversation.state = "waiting"
        conversation.assigned_operator = None
        await session.flush()
        log.info("escalation.opened", escalation_id=escalation.id, conversation_id=conversation.id,
                 bot=conversation.bot, reason=reason)
        if self._metrics:
            self._metrics.escalations.labels(bot=conversation.bot).inc()
        self._bus.publish(ESCALATIONS_TOPIC, {"type": "opened", "escalation_id": escalation.id,
                                              "bot": conversation.bot})
        return escalation
