"""Hand-back: a customer's message that came while a person held the thread, and that nobody answered.

Resolving hands the thread back to the bot. A message the customer sent after the operator's last reply
(even one stored in the instant before the hand-back, which the worker then saw as the operator's) would
otherwise stay unanswered. It goes back to `pending`, so the worker answers it, once: the update is
conditional on the message being `done` with no reply, so of the two callers (`Escalations.resolve` and
the worker's hook, `answer_if_handed_back`) only one moves it.

A question the bot was answering when an operator took the conversation (POST /v1/conversations/{id}/claim)
came before that escalation, and its draft was dropped (`gateway.message_handler`), or never begun (taken before
the worker read it): the worker marks it (`meta.draft_dropped`), and it is answered the same way. Not a request for a person whose draft escalated:
answered again, it would ask for one again. The mark goes when it is requeued.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from gateway.burst import burst_up_to
from gateway.escalation.records import live_escalation
from gateway.models import as_utc, utcnow
from gateway.pipeline.core import accepts_offer, person_asked_for
from storage.meta_keys import merged_meta
from storage.models import Conversation, Escalation, EscalationEvent, Message

if TYPE_CHECKING:
    from gateway.settings import BotSettings

log = structlog.get_logger("gateway.escalation")
# On a customer's message whose bot reply was dropped because an operator took the conversation meanwhile.
DRAFT_DROPPED = "draft_dropped"


async def answer_if_handed_back(sessions: async_sessionmaker[AsyncSession], message: Message) -> None:
    """After the worker set `message` aside for an operator: if the thread is the bot's again, requeue it."""
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, message.conversation_id)
        last = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == message.conversation_id, Escalation.state == "resolved")
            .order_by(Escalation.id.desc()).limit(1))).scalar_one_or_none()
        if conversation is None or conversation.state != "bot" or last is None:
            return
        requeued = await requeue_unanswered(session, conversation_id=conversation.id, since=last.created_at)
    if requeued is not None:
        log.info("escalation.requeued_after_handback", message_id=requeued, escalation_id=last.id,
                 conversation_id=message.conversation_id, bot=message.bot)


async def taken_over_before(session: AsyncSession, message: Message, bot: BotSettings | None = None, *,
                            burst_seconds: float = 0.0) -> dict[str, bool]:
    """`{DRAFT_DROPPED: True}` when the worker holds `message` (no answer) because an operator took its
    conversation after it came and before the bot began answering it; else `{}`. A message held because the
    customer asked for a person (the escalation came after it, opened by the bot) is left as it is. Its
    conversation's live escalation; with none, the last resolved: handed back while the worker relayed it
    (which the resolve, seeing it pending, left to the worker's hook, `answer_if_handed_back`). Nor a request for
    a person as the turn reads one (`person_asked_for`, the `bot`'s `escalation.phrases`), or a yes to the bot's offer
    of one (`accepts_offer`, after its `fallback_text`): no draft says so, the bot never read it; answered after the
    hand-back, it would ask for one again. Read with the pieces of its burst before it (`worker.burst_seconds`),
    joined as the turn joins them: requeued with them, it is answered so."""
    if bot is not None and await _asks_for_a_person(session, message, bot, burst_seconds):
        return {}
    escalation = await live_escalation(session, message.conversation_id) or (await session.execute(
        select(Escalation).where(Escalation.conversation_id == message.conversation_id, Escalation.state == "resolved")
        .order_by(Escalation.id.desc()).limit(1))).scalar_one_or_none()
    if escalation is None or as_utc(message.created_at) >= as_utc(escalation.created_at):
        return {}
    taken = (await session.execute(select(EscalationEvent.id).where(
        EscalationEvent.escalation_id == escalation.id, EscalationEvent.kind == "claimed",
        EscalationEvent.from_state == "bot").limit(1))).scalar_one_or_none()
    return {DRAFT_DROPPED: True} if taken is not None else {}


async def _asks_for_a_person(session: AsyncSession, message: Message, bot: BotSettings, burst_seconds: float) -> bool:
    """Whether the turn would read `message` as a request for a person: its phrases, or a yes to the offer of one
    in the reply before it (the turn's history: the last stored outbound text before it, ignored ones left out).
    The text is its burst's since that reply, joined as the turn joins it (`MessageHandler.handle`): each piece read
    alone, "I want to talk to a human" / "it's urgent" left the second marked, and answered alone after the hand-back."""
    last = (await session.execute(select(Message.id, Message.text).where(
        Message.conversation_id == message.conversation_id, Message.direction == "out", Message.id < message.id,
        Message.status != "ignored", Message.text != "").order_by(Message.id.desc()).limit(1))).first()
    pieces = await burst_up_to(session, message, window_s=burst_seconds, after=last.id if last is not None else 0)
    text = ("\n".join(m.text for m in pieces if (m.text or "").strip()) if len(pieces) > 1 else message.text or "").strip()
    if person_asked_for(text, bot) is not None:
        return True
    return accepts_offer(text, [{"role": "assistant", "content": last.text}] if last is not None else [], bot)


async def requeue_unanswered(session: AsyncSession, *, conversation_id: int, since: datetime) -> int | None:
    """Put the customer's last message back to `pending` when it came during the hold (after `since`), or
    its draft was dropped for the operator who took the conversation (`DRAFT_DROPPED`), and after the
    operator's last reply, and nothing answered it; returns its id. A dropped one goes back with the dropped
    pieces of its burst before it (`_dropped_before`), answered whole, once. Conditional on `done` with no
    reply, in one statement, so of two callers (resolve and the worker's hook) only one requeues them."""
    last = (await session.execute(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "in", Message.status != "ignored")
        .order_by(Message.id.desc()).limit(1))).scalar_one_or_none()
    if last is None or last.status != "done":
        return None  # still pending: the worker answers it after the hand-back anyway
    dropped = (last.meta or {}).get(DRAFT_DROPPED) is True
    if as_utc(last.created_at) < as_utc(since) and not dropped:
        return None  # before the escalation: what asked for a person, or what the bot answered
    operator_reply = (await session.execute(select(func.max(Message.id)).where(
        Message.conversation_id == conversation_id, Message.direction == "out",
        Message.author == "operator"))).scalar_one_or_none()
    if operator_reply is not None and operator_reply > last.id:
        return None
    pieces = [last.id, *(await _dropped_before(session, last, after=operator_reply or 0))] if dropped else [last.id]
    reply = aliased(Message)
    answered = exists().where(reply.reply_to_id == Message.id, reply.direction == "out")
    moved = await session.execute(
        update(Message).where(Message.id.in_(pieces), Message.status == "done", ~answered)
        .values(status="pending", updated_at=utcnow(),
                **({"meta": merged_meta(session.bind.dialect.name, {}, dropped=(DRAFT_DROPPED,))} if dropped else {}))
        .execution_options(synchronize_session=False))
    return last.id if moved.rowcount > 0 else None


async def _dropped_before(session: AsyncSession, last: Message, *, after: int) -> list[int]:
    """The customer's messages just before `last` (after the message id `after`) also marked `DRAFT_DROPPED`,
    done: the rest of a burst the turn joined (its pieces all marked), or relayed piece by piece (taken before the
    bot began). Requeued with `last`, the worker joins them again (gateway/burst.py): only `last` went back, and
    the bot answered the question's last piece alone."""
    earlier = (await session.execute(select(Message).where(
        Message.conversation_id == last.conversation_id, Message.direction == "in", Message.status != "ignored",
        Message.id < last.id, Message.id > after).order_by(Message.id.desc()))).scalars()
    pieces: list[int] = []
    for message in earlier:
        if message.status != "done" or (message.meta or {}).get(DRAFT_DROPPED) is not True:
            break
        pieces.append(message.id)
    return pieces
