"""Unclaimed escalations: after the claim timeout the customer is told honestly and operators pinged again.
Claimed ones where the customer has waited as long for the holder's reply: operators are pinged (the
customer is not told again), so a holder who went home is noticed and the claim taken over.

A periodic task. The reminder is set with a conditional UPDATE (`reminded_at` unset or older than the
start of the current wait), so with several replicas running it, each wait is reminded exactly once. A
released claim starts a new wait (`waiting_since`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta

import structlog
from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.background import cancel
from gateway.escalation.handoff import Escalations
from gateway.escalation.records import locked, record_event
from gateway.models import as_utc, utcnow
from gateway.operators.notices import after_hours_message, is_open, next_opening
from gateway.settings import BotSettings, Settings
from storage import repositories as repo
from storage.models import Conversation, Escalation, EscalationEvent, Message

log = structlog.get_logger("gateway.operators.reminders")


class HandoffReminders:
    """Checks open escalations every `interval` seconds; also runs `checks`, other periodic repairs (the
    Slack operator channel's missing headers, chat moves left unfinished), each given the same `now`."""

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
            if hours is not None and not is_open(hours, now):
                await self._tell_closed(bot, deadline=deadline, now=now)
                continue
            if hours is not None and next_opening(hours, now - timedelta(days=1)) > deadline:
                continue
            async with self._sessions() as session:
                overdue = (await session.execute(select(Escalation.id).where(
                    Escalation.bot == bot.name, Escalation.state == "open", _not_reminded_since(_WAIT_START),
                    _WAIT_START < deadline))).scalars().all()
            for escalation_id in overdue:
                won, message_id = await self._remind(escalation_id, text=bot.escalation.unclaimed_message, now=now)
                if not won:
                    continue
                reminded.append(escalation_id)
                if message_id is not None and self._escalations.outbox is not None:
                    await self._escalations.outbox.deliver(message_id)
            reminded += await self._remind_stale_claims(bot.name, deadline=deadline, now=now)
        return reminded

    async def _tell_closed(self, bot: BotSettings, *, deadline: datetime, now: datetime) -> None:
        """Closed now: the customer of an escalation whose wait began within business hours (so they heard
        "a person will reply shortly", no off-hours note), or with a release (told nothing: a holder who signs
        out on their way home releases theirs), and passed the claim timeout (reminded before closing or not: "everyone
        is busy" did not say nobody is there till the opening) is told when a person
        is back (`replies.after_hours`), once per wait (`after_hours` in the history). Operators are pinged
        after the next opening (those not reminded yet in this wait), as before: nobody is there to read it now."""
        hours = bot.escalation.business_hours
        async with self._sessions() as session:
            rows = (await session.execute(select(Escalation.id, _WAIT_START, Escalation.waiting_since).where(
                # Reminded before closing or not: "a person will reply here" said nothing of the weekend either.
                Escalation.bot == bot.name, Escalation.state == "open",
                _WAIT_START < deadline, ~_told_after_hours()))).all()  # not locked again each run, all weekend
        for escalation_id, began, released in rows:
            if released is None and not is_open(hours, as_utc(began)):
                continue  # opened off hours: the acknowledgement said when already (a release says nothing to them)
            async with self._sessions() as session, session.begin():
                escalation = await session.get(Escalation, escalation_id, with_for_update=True)
                if escalation is None or escalation.state != "open":
                    continue
                told = (await session.execute(select(EscalationEvent.id).where(  # by another replica meanwhile
                    EscalationEvent.escalation_id == escalation_id, EscalationEvent.kind == "after_hours",
                    EscalationEvent.created_at >= (escalation.waiting_since or escalation.created_at)).limit(1))).first()
                if told is not None:
                    continue
                conversation = await session.get(Conversation, escalation.conversation_id)
                message = await repo.add_outbound(session, conversation=conversation, author="system",
                                                  text=after_hours_message(hours, now, bot.replies))
                record_event(session, escalation, kind="after_hours", actor="system",
                             reason="unclaimed at closing: the customer was told when a person is back")
            log.info("escalation.after_hours_told", escalation_id=escalation_id, bot=bot.name)
            if self._escalations.outbox is not None:
                await self._escalations.outbox.deliver(message.id)

    async def _remind_stale_claims(self, bot: str, *, deadline: datetime, now: datetime) -> list[int]:
        """Claimed escalations whose customer wrote before `deadline` and got no operator reply since:
        ping the operators once per such wait."""
        reminded: list[int] = []
        async with self._sessions() as session:
            claimed = (await session.execute(select(Escalation).where(
                Escalation.bot == bot, Escalation.state == "claimed"))).scalars().all()
            waits = [(e, await _customer_waiting_since(session, e)) for e in claimed]
        for escalation, since in waits:
            if since is None or since >= deadline:
                continue
            async with self._sessions() as session, session.begin():
                won = await session.execute(
                    update(Escalation).where(Escalation.id == escalation.id, Escalation.state == "claimed",
                                             Escalation.operator == escalation.operator, _not_reminded_since(since))
                    .values(reminded_at=now).execution_options(synchronize_session=False))
                if won.rowcount != 1:
                    continue  # released, taken over or resolved meanwhile, or another replica reminded it
                escalation = await locked(session, escalation.id)
                minutes = max(1, int((now - since).total_seconds() // 60))
                record_event(session, escalation, kind="reminded", actor="system",
                             reason=f"the customer has waited {minutes} min for {escalation.operator}'s reply")
            log.warning("escalation.claim_stale", escalation_id=escalation.id, bot=bot, operator=escalation.operator)
            await self._escalations.emit({"type": "stale_claim", "escalation_id": escalation.id, "bot": bot,
                                          "conversation_id": escalation.conversation_id,
                                          "operator": escalation.operator, "waiting_minutes": minutes})
            reminded.append(escalation.id)
        return reminded

    async def _remind(self, escalation_id: int, *, text: str, now: datetime) -> tuple[bool, int | None]:
        """Mark the wait reminded, once across replicas (False: claimed meanwhile, or reminded by
        another), with the customer's notice to send (None when `unclaimed_message` is empty)."""
        async with self._sessions() as session, session.begin():
            won = await session.execute(
                update(Escalation).where(Escalation.id == escalation_id, Escalation.state == "open",
                                         _not_reminded_since(_WAIT_START))
                .values(reminded_at=now).execution_options(synchronize_session=False))
            if won.rowcount != 1:
                return False, None  # claimed meanwhile, or another replica reminded it
            escalation = await session.get(Escalation, escalation_id)
            conversation = await session.get(Conversation, escalation.conversation_id)
            message = await repo.add_outbound(session, conversation=conversation, text=text, author="system") \
                if text.strip() else None  # "" tells the customer nothing; the operators are still pinged
            record_event(session, escalation, kind="reminded", actor="system",
                         reason="nobody claimed it within the claim timeout")
            # How long, and whether the customer heard anything: with `unclaimed_message: ""` they did not.
            waited = now - as_utc(escalation.waiting_since or escalation.created_at)
            event = {"type": "reminder", "escalation_id": escalation_id, "bot": escalation.bot,
                     "conversation_id": escalation.conversation_id, "customer_told": message is not None,
                     "waiting_minutes": max(1, int(waited.total_seconds() // 60))}
        log.warning("escalation.unclaimed", escalation_id=escalation_id, bot=event["bot"])
        await self._escalations.emit(event)
        return True, message.id if message is not None else None

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
            await cancel([self._task])
            self._task = None


_WAIT_START = func.coalesce(Escalation.waiting_since, Escalation.created_at)


def _told_after_hours():
    """SQL: the escalation's customer got the after_hours note in its current wait (a release begins one)."""
    return select(EscalationEvent.id).where(
        EscalationEvent.escalation_id == Escalation.id, EscalationEvent.kind == "after_hours",
        EscalationEvent.created_at >= _WAIT_START).exists()


def _not_reminded_since(start):
    """No reminder yet for the wait that began at `start` (a column expression or a datetime)."""
    return or_(Escalation.reminded_at.is_(None), Escalation.reminded_at < start)


async def _customer_waiting_since(session: AsyncSession, escalation: Escalation) -> datetime | None:
    """When the customer began to wait for the holder's reply, or None: from the claim when they asked for
    a person and nobody has written to them since (what they asked came before the claim: a holder who
    claimed and closed the browser was never noticed), else from their first message since the last reply;
    never before the claim: a holder who took over a stale claim has the whole timeout to answer it too."""
    operator_reply = (await session.execute(select(func.max(Message.id)).where(
        Message.conversation_id == escalation.conversation_id, Message.direction == "out",
        Message.author == "operator"))).scalar_one_or_none() or 0
    answered = operator_reply and as_utc((await session.execute(select(Message.created_at).where(
        Message.id == operator_reply))).scalar_one()) >= as_utc(escalation.created_at)
    asked = (await session.execute(select(EscalationEvent.id).where(   # not a conversation taken without one
        EscalationEvent.escalation_id == escalation.id, EscalationEvent.kind == "opened").limit(1))).first()
    if asked and not answered:
        return as_utc(escalation.claimed_at)
    first = (await session.execute(select(Message.created_at).where(
        Message.conversation_id == escalation.conversation_id, Message.direction == "in",
        Message.id > operator_reply, Message.created_at >= escalation.created_at)
        .order_by(Message.id).limit(1))).scalar_one_or_none()
    return max(as_utc(first), as_utc(escalation.claimed_at)) if first is not None else None
