"""Unclaimed escalations: after the claim timeout the customer is told honestly and operators pinged again.

A periodic task. The reminder is set with a conditional UPDATE (`reminded_at IS NULL`), so with several
replicas running it, each escalation is reminded exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta

import structlog
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.escalation import Escalations, record_event
from gateway.models import utcnow
from gateway.operators.notices import is_open, next_opening
from gateway.settings import Settings
from storage import repositories as repo
from storage.models import Conversation, Escalation

log = structlog.get_logger("gateway.operators.reminders")


class HandoffReminders:
    """Checks open escalations every `interval` seconds; also runs `checks`, other periodic repairs of
    the handoff (the Slack operator channel's missing headers), each given the same `now`."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, settings: Settings, escalations: Escalations,
                 interval: float = 30.0, checks: Iterable[Callable[[datetime], Awaitable[object]]] = ()) -> None:
        self._sessions = sessions
        self._settings = settings
        self._escalations = escalations
        self.interval = interval
        self.checks = list(checks)
        self._task: asyncio.Task | None = None

    async def run_once(self, *, now: datetime | None = None) -> list[int]:
        """Remind every overdue open escalation once; returns their ids."""
        now = now or utcnow()
        # Repairs first: a Slack header posted late is then there for the reminder's ping.
        for check in self.checks:
            try:
                await check(now)
            except Exception:  # one broken repair must not stop the reminders
                log.exception("reminders.check_failed", check=getattr(check, "__qualname__", repr(check)))
        reminded: list[int] = []
        for bot in self._settings.bots:
            deadline = now - timedelta(seconds=bot.escalation.claim_timeout_seconds)
            hours = bot.escalation.business_hours
            # Off hours the customer was already told when a person replies, and "everyone is busy" would
            # not be true; the clock starts again when the team starts work (the current shift's opening).
            if hours is not None and (not is_open(hours, now) or next_opening(hours, now - timedelta(days=1)) > deadline):
                continue
            async with self._sessions() as session:
                overdue = (await session.execute(select(Escalation.id).where(
                    Escalation.bot == bot.name, Escalation.state == "open", Escalation.reminded_at.is_(None),
                    Escalation.created_at < deadline))).scalars().all()
            for escalation_id in overdue:
                message_id = await self._remind(escalation_id, text=bot.escalation.unclaimed_message, now=now)
                if message_id is None:
                    continue
                reminded.append(escalation_id)
                if self._escalations.outbox is not None:
                    await self._escalations.outbox.deliver(message_id)
        return reminded

    async def _remind(self, escalation_id: int, *, text: str, now: datetime) -> int | None:
        async with self._sessions() as session, session.begin():
            won = await session.execute(
                update(Escalation).where(Escalation.id == escalation_id, Escalation.state == "open",
                                         Escalation.reminded_at.is_(None))
                .values(reminded_at=now).execution_options(synchronize_session=False))
            if won.rowcount != 1:
                return None  # claimed meanwhile, or another replica reminded it
            escalation = await session.get(Escalation, escalation_id)
            conversation = await session.get(Conversation, escalation.conversation_id)
            message = await repo.add_outbound(session, conversation=conversation, text=text, author="system")
            record_event(session, escalation, kind="reminded", actor="system",
                         reason="nobody claimed it within the claim timeout")
            event = {"type": "reminder", "escalation_id": escalation_id, "bot": escalation.bot,
                     "conversation_id": escalation.conversation_id}
        log.warning("escalation.unclaimed", escalation_id=escalation_id, bot=event["bot"])
        await self._escalations.emit(event)
        return message.id

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a database blip must not end the reminders
                log.exception("reminders.failed")
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Start the periodic check in the background."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="handoff-reminders")

    async def stop(self) -> None:
        """Stop the periodic check."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
