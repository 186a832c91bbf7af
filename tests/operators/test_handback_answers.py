"""A customer message that came during the hold and that no operator answered is answered by the bot
after the hand-back, exactly once (SQLite and PostgreSQL): the resolve race of review finding 3."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.models import ConversationRef
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message


@pytest.fixture
async def world(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    escalations = Escalations(sessions, settings=Settings(bots=[{"name": "acme"}]), bus=EventBus())
    yield sessions, escalations
    await escalations.drain()
    await engine.dispose()


async def _held(sessions, escalations, chat: str) -> tuple[int, int]:
    """A conversation whose escalation sam holds; (conversation id, escalation id)."""
    async with sessions() as session, session.begin():
        conversation = await repo.get_or_create_conversation(
            session, bot="acme", ref=ConversationRef(channel="web", chat=chat), contact_id=None)
        escalation = await escalations.open_in(session, conversation=conversation, reason="customer asked")
        ids = conversation.id, escalation.id
    await escalations.claim(ids[1], operator="sam", bots=None)
    return ids


async def _customer(sessions, conversation_id: int, text: str, *, status: str) -> int:
    async with sessions() as session, session.begin():
        message = Message(conversation_id=conversation_id, bot="acme", channel="web", direction="in",
                          author="contact", external_id=text, text=text, status=status)
        session.add(message)
        await session.flush()
        return message.id


async def _status(sessions, message_id: int) -> str:
    async with sessions() as session:
        return (await session.get(Message, message_id)).status


async def test_handback_resolve_requeues_the_unanswered_held_message(world):
    sessions, escalations = world
    cid, eid = await _held(sessions, escalations, "hb-1")
    await escalations.reply(eid, operator="sam", text="Hi, Sam here.", bots=None)
    earlier = await _customer(sessions, cid, "thanks", status="done")
    question = await _customer(sessions, cid, "one more question: how do I export?", status="done")

    await escalations.resolve(eid, operator="sam", bots=None)

    assert await _status(sessions, question) == "pending"  # the worker answers it, as the bot
    assert await _status(sessions, earlier) == "done"  # its answer sees the earlier one in the history


async def test_handback_resolve_leaves_a_message_the_operator_answered(world):
    sessions, escalations = world
    cid, eid = await _held(sessions, escalations, "hb-2")
    question = await _customer(sessions, cid, "where is my refund?", status="done")
    await escalations.reply(eid, operator="sam", text="On its way.", bots=None)

    await escalations.resolve(eid, operator="sam", bots=None)

    assert await _status(sessions, question) == "done"
    async with sessions() as session:
        assert (await session.get(Conversation, cid)).state == "bot"


async def test_handback_message_in_flight_at_resolve_is_answered_exactly_once(world):
    sessions, escalations = world
    cid, eid = await _held(sessions, escalations, "hb-3")
    # Stored just before the resolve; a worker already read the state "operator" and is finishing it.
    question = await _customer(sessions, cid, "one more question: how do I export?", status="pending")
    await escalations.resolve(eid, operator="sam", bots=None)
    assert await _status(sessions, question) == "pending"

    async with sessions() as session, session.begin():  # the worker stores it with no reply (it was held)
        (await session.get(Message, question)).status = "done"
    await escalations.customer_message(question)  # the worker's hook after a held message
    assert await _status(sessions, question) == "pending"

    async with sessions() as session, session.begin():  # the worker answers it as the bot
        conversation = await session.get(Conversation, cid)
        await repo.add_outbound(session, conversation=conversation, text="Use Settings → Export.",
                                reply_to_id=question)
        (await session.get(Message, question)).status = "done"
    await escalations.customer_message(question)  # a repeated hook never answers it twice
    assert await _status(sessions, question) == "done"
    async with sessions() as session:
        replies = (await session.execute(select(Message).where(Message.reply_to_id == question))).scalars().all()
    assert [m.text for m in replies] == ["Use Settings → Export."]
