"""The escalation rows every transition shares: finding a thread's live escalation, writing the audit
trail (`escalation_events`) and saying why a transition lost its race. Both `gateway.escalation.handoff` and
`gateway.escalation.claims` use them, so they live below both."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.errors import Conflict
from gateway.models import utcnow
from storage.models import Conversation, Escalation, EscalationEvent
from storage.text import storable_text


async def live_escalation(session: AsyncSession, conversation_id: int) -> Escalation | None:
    """The conversation's open or claimed escalation, newest first; None when there is none."""
    return (await session.execute(select(Escalation).where(
        Escalation.conversation_id == conversation_id, Escalation.state.in_(("open", "claimed")))
        .order_by(Escalation.id.desc()).limit(1))).scalar_one_or_none()


def hand_conversation(conversation_id: int, *, state: str, operator: str | None, only_from: str | None = None):
    """The UPDATE that puts a conversation in `state`, assigned to `operator` (None: nobody); with `only_from`,
    only a conversation in that state (its rowcount says whether it was)."""
    guard = () if only_from is None else (Conversation.state == only_from,)
    return (update(Conversation).where(Conversation.id == conversation_id, *guard)
            .values(state=state, assigned_operator=operator).execution_options(synchronize_session=False))


async def locked(session: AsyncSession, escalation_id: int) -> Escalation:
    """The escalation as this transaction's lock on it sees it: its conversation read before the lock may
    have been merged away by a chat's move (storage/chat_moves.py), which locks escalations first."""
    return await session.get(Escalation, escalation_id, populate_existing=True)


def record_event(session: AsyncSession, escalation: Escalation, *, kind: str, actor: str, reason: str = "",
                 from_state: str | None = None, to_state: str | None = None) -> None:
    """Add one row to the audit trail of an escalation, inside the caller's transaction. The reason is
    an operator's or a model's free text: a NUL in it (valid JSON) failed the insert on PostgreSQL, a 500."""
    session.add(EscalationEvent(escalation_id=escalation.id, conversation_id=escalation.conversation_id, kind=kind,
                                from_state=from_state, to_state=to_state, actor=actor,
                                reason=storable_text((reason or "")[:2000]), created_at=utcnow()))


def conflict_message(escalation: Escalation | None, *, newer: Escalation | None = None) -> str:
    """Why a conditional transition found the escalation in another state (the 409's text). `newer`: the
    conversation's live escalation, when a resolved one's customer asked for a person again since."""
    if escalation is None:
        return "the escalation no longer exists"
    if escalation.state == "claimed":
        return f"escalation {escalation.id} is already claimed by {escalation.operator}"
    if escalation.state == "resolved":
        # Who, so an operator whose reply came after a colleague's hand-back knows whom to ask.
        by = f" by {escalation.operator}" if escalation.operator else ""
        if newer is None:
            return f"escalation {escalation.id} is already resolved{by}: the bot answers the customer again"
        held = f"claimed by {newer.operator}" if newer.state == "claimed" else newer.state
        return (f"escalation {escalation.id} is already resolved{by}, and the customer asked for a person again: "
                f"escalation {newer.id}, {held}")
    return f"escalation {escalation.id} is {escalation.state}; claim it first"


async def conflict_now(session: AsyncSession, escalation: Escalation | None) -> Conflict:
    """The Conflict of `conflict_message` as the conversation is now: after a hand-back, the bot answers the
    customer only while they have not asked for a person again (a newer escalation, which the message then
    names). It carries the state it was worded from: a caller adding what to do next reads no other."""
    resolved = escalation is not None and escalation.state == "resolved"
    newer = await live_escalation(session, escalation.conversation_id) if resolved else None
    newer = newer if newer is not None and newer.id != escalation.id else None
    if escalation is None:
        return Conflict(conflict_message(None))
    return Conflict(conflict_message(escalation, newer=newer), state=escalation.state,
                    conversation_id=escalation.conversation_id, asked_again=newer is not None,
                    newer_id=newer.id if newer is not None else None, operator=escalation.operator,
                    escalation_id=escalation.id)
