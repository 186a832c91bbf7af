"""Who holds an escalation: claim, take over and release, mixed into `Escalations`.

The state machine these belong to is drawn in `gateway.escalation.handoff`. The claim rules (a retried claim, an
explicit take-over, taking a conversation that was never escalated) are its largest part, so they have
their own module. The rows both modules write and read are in `gateway.escalation.records`.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.errors import Conflict, NotFound
from gateway.escalation.records import conflict_now, hand_conversation, live_escalation, locked, record_event
from gateway.models import as_utc, utcnow
from storage import repositories as repo
from storage.models import Conversation, Escalation, Message

log = structlog.get_logger("gateway.escalation")  # one logger for the whole state machine


class ClaimTransitions:
    """The claim transitions of `Escalations`; they use its sessions, settings, metrics, `get`,
    `servable`, `_after_commit` and `_deliver`."""

    async def claim(self, escalation_id: int, *, operator: str, bots: Iterable[str] | None,
                    reason: str = "", take_over: bool = False) -> Escalation:
        """open → claimed (conversation waiting → operator). Exactly one concurrent claim wins.
        With `take_over`, a claim another operator holds passes to `operator` (recorded, announced)."""

        escalation = await self.get(escalation_id, bots=bots)
        if take_over and escalation.state == "claimed" and escalation.operator != operator:
            return await self._take_over(escalation, operator=operator, reason=reason)
        async with self._sessions() as session, session.begin():
            now = utcnow()
            won = await session.execute(
                update(Escalation).where(Escalation.id == escalation_id, Escalation.state == "open")
                .values(state="claimed", operator=operator, claimed_at=now)
                .execution_options(synchronize_session=False))
            if won.rowcount != 1:
                current = await session.get(Escalation, escalation_id)  # None: erased meanwhile (forget)
                if current is not None and current.state == "claimed" and current.operator == operator:
                    return current  # a retried claim by the holder is not a conflict
                raise await conflict_now(session, current)
            escalation = await locked(session, escalation_id)
            await session.execute(hand_conversation(escalation.conversation_id, state="operator", operator=operator))
            record_event(session, escalation, kind="claimed", from_state="waiting", to_state="operator", actor=operator,
                    reason=reason)
            notice = await self._tell_claimed(session, escalation.conversation_id)
            self._after_commit(session, {"type": "claimed", "escalation_id": escalation_id, "bot": escalation.bot,
                                         "conversation_id": escalation.conversation_id, "operator": operator})
        if self._metrics:  # the customer's current wait: from the opening, or from the claim's last release
            waited = now - as_utc(escalation.waiting_since or escalation.created_at)
            self._metrics.observe_claim(escalation.bot, waited.total_seconds())
        log.info("escalation.claimed", escalation_id=escalation_id, conversation_id=escalation.conversation_id,
                 operator=operator, bot=escalation.bot)
        if notice is not None:
            await self._deliver(notice.id)
        return await self.get(escalation_id, bots=None)

    async def _tell_claimed(self, session: AsyncSession, conversation_id: int) -> Message | None:
        """Store `escalation.claimed_message` for the customer (None when the bot's is empty)."""
        conversation = await session.get(Conversation, conversation_id)
        text = self._settings.bot(conversation.bot).escalation.claimed_message if conversation else ""
        if not text.strip():
            return None
        return await repo.add_outbound(session, conversation=conversation, author="system", text=text)

    async def _take_over(self, escalation: Escalation, *, operator: str, reason: str) -> Escalation:
        """claimed by someone else → claimed by `operator`; only if the holder is still the one we saw."""

        previous = escalation.operator
        async with self._sessions() as session, session.begin():
            won = await session.execute(
                update(Escalation).where(Escalation.id == escalation.id, Escalation.state == "claimed",
                                         Escalation.operator == previous)
                .values(operator=operator, claimed_at=utcnow()).execution_options(synchronize_session=False))
            if won.rowcount != 1:  # resolved, released or taken by a third operator meanwhile
                raise await conflict_now(session, await session.get(Escalation, escalation.id))
            escalation = await locked(session, escalation.id)
            await session.execute(hand_conversation(escalation.conversation_id, state="operator", operator=operator))
            record_event(session, escalation, kind="taken_over", from_state="operator", to_state="operator",
                         actor=operator, reason=reason or f"taken over from {previous}")
            self._after_commit(session, {"type": "taken_over", "escalation_id": escalation.id, "bot": escalation.bot,
                                         "conversation_id": escalation.conversation_id, "operator": operator,
                                         "previous_operator": previous})
        log.info("escalation.taken_over", escalation_id=escalation.id, conversation_id=escalation.conversation_id,
                 operator=operator, previous=previous, bot=escalation.bot)
        return await self.get(escalation.id, bots=None)

    async def release(self, escalation_id: int, *, operator: str, bots: Iterable[str] | None,
                      reason: str = "") -> Escalation:
        """claimed → open (conversation operator → waiting), by the holder: any operator may claim it
        again, and the claim timeout (with its reminder) counts again from now."""

        escalation = await self.get(escalation_id, bots=bots)
        async with self._sessions() as session, session.begin():
            now = utcnow()
            done = await session.execute(
                update(Escalation).where(Escalation.id == escalation_id, Escalation.state == "claimed",
                                         Escalation.operator == operator)
                .values(state="open", operator=None, claimed_at=None, waiting_since=now)
                .execution_options(synchronize_session=False))
            if done.rowcount != 1:
                current = await session.get(Escalation, escalation_id)
                if current is not None and current.state == "open":
                    raise Conflict(f"escalation {escalation_id} is not claimed")
                raise await conflict_now(session, current)
            escalation = await locked(session, escalation_id)
            await session.execute(hand_conversation(escalation.conversation_id, state="waiting", operator=None))
            record_event(session, escalation, kind="released", from_state="operator", to_state="waiting",
                         actor=operator, reason=reason)
            self._after_commit(session, {"type": "released", "escalation_id": escalation_id, "bot": escalation.bot,
                                         "conversation_id": escalation.conversation_id, "operator": operator})
        log.info("escalation.released", escalation_id=escalation_id, conversation_id=escalation.conversation_id,
                 operator=operator, bot=escalation.bot)
        return await self.get(escalation_id, bots=None)

    async def claim_conversation(self, conversation_id: int, *, operator: str,
                                 bots: Iterable[str] | None) -> Escalation:
        """Take over a conversation, escalated or not: bot → operator directly, or claim its open escalation."""

        async with self._sessions() as session, session.begin():
            conversation = await session.get(Conversation, conversation_id)
            if conversation is None or conversation.bot not in self.servable(bots):
                raise NotFound(f"no conversation {conversation_id}")
            taken = await session.execute(
                hand_conversation(conversation_id, state="operator", operator=operator, only_from="bot"))
            if taken.rowcount == 1:
                now = utcnow()
                escalation = Escalation(conversation_id=conversation_id, bot=conversation.bot, state="claimed",
                                        reason="taken over by an operator", operator=operator, notes=[],
                                        created_at=now, claimed_at=now)
                session.add(escalation)
                await session.flush()
                record_event(session, escalation, kind="claimed", from_state="bot", to_state="operator", actor=operator,
                        reason="taken over without an escalation")
                notice = await self._tell_claimed(session, conversation_id)
                self._after_commit(session, {"type": "claimed", "escalation_id": escalation.id,
                                             "bot": conversation.bot, "conversation_id": conversation_id,
                                             "operator": operator})
            else:
                existing = await live_escalation(session, conversation_id)
        if taken.rowcount == 1:
            if notice is not None:
                await self._deliver(notice.id)
            return escalation
        if existing is None:
            raise Conflict(f"conversation {conversation_id} changed state while claiming; try again")
        return await self.claim(existing.id, operator=operator, bots=bots)
