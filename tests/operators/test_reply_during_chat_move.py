"""An operator replies while a chat's move merges the escalated conversation into the one the new chat
opened (storage/chat_moves.py): the reply lands in the conversation that stays, without a deadlock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.models import utcnow
from gateway.operators import reminders
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, EscalationEvent, Message
from tests.storage.test_chat_moves import NEW, OLD, _move, _said
from tests.worker_rig import until_waiting_for_a_lock


@pytest.fixture
async def world(migrated_url):
    """A conversation in the old group whose escalation sam holds, and one the new chat opened first."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    inbox = Inbox(sessions)
    escalations = Escalations(sessions, settings=Settings(bots=[{"name": "acme"}]), bus=EventBus())
    held = await inbox.accept("acme", _said("1", OLD))
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, held.conversation_id)
        escalation = await escalations.open_in(session, conversation=conversation, reason="customer asked")
    await escalations.claim(escalation.id, operator="sam", bots=None)
    stays = await inbox.accept("acme", _said("2", NEW))
    yield engine, inbox, escalations, escalation.id, stays.conversation_id
    await escalations.drain()
    await engine.dispose()


def _merge_after_the_read(inbox: Inbox, escalations: Escalations) -> None:
    """The chat's move commits between an operator action's read of the escalation and its lock."""
    get, merged = escalations.get, []

    async def get_as_the_chat_moves(escalation_id, **kwargs):
        found = await get(escalation_id, **kwargs)
        if not merged:
            merged.append(await inbox.accept("acme", _move("3")))
        return found

    escalations.get = get_as_the_chat_moves


async def test_a_reply_after_the_merge_goes_to_the_conversation_that_stays(world):
    """The reply read the escalation's conversation before it locked the escalation: merged away meanwhile,
    that conversation was gone, and the reply failed (a 500 to the operator)."""
    engine, inbox, escalations, escalation_id, stays = world
    _merge_after_the_read(inbox, escalations)
    reply = await escalations.reply(escalation_id, operator="sam", text="Sam here.", bots=None)
    assert reply.conversation_id == stays and (await escalations.get(escalation_id, bots=None)).conversation_id == stays


@pytest.mark.parametrize(("transition", "state"), [("release", "waiting"), ("resolve", "bot")])
async def test_a_transition_after_the_merge_changes_the_conversation_that_stays(world, transition, state):
    """A release set the state of the conversation merged away (the one that stays kept "operator" with
    nobody holding it), and a resolve failed on it."""
    engine, inbox, escalations, escalation_id, stays = world
    _merge_after_the_read(inbox, escalations)
    await getattr(escalations, transition)(escalation_id, operator="sam", bots=None)
    async with session_factory(engine)() as session:
        assert (await session.get(Conversation, stays)).state == state


async def test_a_stale_claim_s_reminder_after_the_merge_is_recorded_on_the_conversation_that_stays(
        world, monkeypatch):
    """The reminder recorded its event on the conversation it had read before its update: merged away
    meanwhile, the insert failed on the foreign key, and the round with it."""
    engine, inbox, escalations, escalation_id, stays = world
    await inbox.accept("acme", _said("4", OLD))  # the customer waits for sam's reply
    waiting_since, merged = reminders._customer_waiting_since, []

    async def waiting_as_the_chat_moves(session, escalation):
        since = await waiting_since(session, escalation)
        if not merged:
            merged.append(await inbox.accept("acme", _move("3")))
        return since

    monkeypatch.setattr(reminders, "_customer_waiting_since", waiting_as_the_chat_moves)
    sessions = session_factory(engine)
    remind = reminders.HandoffReminders(sessions, settings=Settings(bots=[{"name": "acme"}]), escalations=escalations)
    assert await remind.run_once(now=utcnow() + timedelta(hours=1)) == [escalation_id]
    async with sessions() as session:
        assert (await session.execute(select(EscalationEvent.conversation_id).where(
            EscalationEvent.kind == "reminded"))).scalar_one() == stays


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_merge_during_a_reply_waits_for_it_instead_of_deadlocking(world, monkeypatch):
    """The reply locks the escalation, then writes to its conversation; the merge locked the conversations,
    then updated their escalations: each held a row the other waited for, and PostgreSQL aborted one."""
    engine, inbox, escalations, escalation_id, stays = world
    store, moves = repo.add_outbound, []

    async def add_outbound_as_the_chat_moves(session, **kwargs):
        if kwargs.get("author") == "operator" and not moves:
            moves.append(asyncio.create_task(inbox.accept("acme", _move("3"))))
            await until_waiting_for_a_lock(engine)  # the move holds what it got, and waits for the rest
        return await store(session, **kwargs)

    monkeypatch.setattr(repo, "add_outbound", add_outbound_as_the_chat_moves)
    with capture_logs() as logs:
        reply = await escalations.reply(escalation_id, operator="sam", text="Sam here.", bots=None)
        await asyncio.wait_for(moves[0], 20)
    assert [e for e in logs if e["event"] == "db.conflict_retried"] == []
    async with engine.connect() as connection:
        assert await connection.scalar(select(Message.conversation_id).where(Message.id == reply.id)) == stays
