"""Unclaimed escalations: after the claim timeout the customer is told honestly, once, and operators are
pinged again on the bus and in the escalation's Slack operator thread; claimed ones are left alone."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from gateway.escalation.handoff import Escalations
from gateway.events import ESCALATIONS_TOPIC, EventBus
from gateway.models import ConversationRef
from gateway.operators.reminders import HandoffReminders
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Escalation, EscalationEvent, Message
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, auth

module_loop = pytest.mark.asyncio(loop_scope="module")  # the app is shared by the module
TIMEOUT = 900.0  # the default escalation.claim_timeout_seconds of the conftest's `acme`
UNCLAIMED = Settings(bots=[{"name": "acme"}]).bot("acme").escalation.unclaimed_message


def _aware(value):
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


async def _escalate(client, session_id: str) -> Escalation:
    response = await client.post("/v1/bots/acme/chat", json={"session_id": session_id,
                                                              "text": "I want to talk to a human"})
    assert response.status_code == 200 and response.json()["state"] == "waiting"
    conversation_id = response.json()["conversation_id"]
    async with client.services.sessions() as session:
        return (await session.execute(select(Escalation).where(
            Escalation.conversation_id == conversation_id))).scalar_one()


async def _customer_texts(client, session_id: str) -> list[str]:
    body = (await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")).json()
    return [m["text"] for m in body["messages"] if m["direction"] == "out"]


def _thread_posts(slack, thread_ts: str) -> list:
    return [c for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts]


@module_loop
async def test_reminders_unclaimed_escalation_tells_customer_once_and_pings_operators(client, slack):
    escalation = await _escalate(client, "r-1")
    reminders = client.services.reminders

    async def header_posted():
        async with client.services.sessions() as session:
            row = await session.get(Escalation, escalation.id)
            return row.slack_ts

    thread_ts = await wait_until(header_posted)
    created = _aware(escalation.created_at)

    assert await reminders.run_once(now=created + timedelta(seconds=TIMEOUT - 5)) == []
    assert UNCLAIMED not in await _customer_texts(client, "r-1")

    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        reminded = await reminders.run_once(now=created + timedelta(seconds=TIMEOUT + 5))
        event = await asyncio.wait_for(queue.get(), 5)
    assert escalation.id in reminded
    assert event == {"type": "reminder", "escalation_id": escalation.id, "bot": "acme",
                     "conversation_id": escalation.conversation_id, "customer_told": True, "waiting_minutes": 15}
    assert (await _customer_texts(client, "r-1")).count(UNCLAIMED) == 1
    [ping] = [c for c in _thread_posts(slack, thread_ts) if "Still unclaimed" in c.params.get("text", "")]
    assert ping.params["channel"] == OPS_CHANNEL and "<!here>" in ping.params["text"]
    assert ping.params.get("reply_broadcast") in (True, "true", "1", 1)

    # The next runs (this replica or another) do not repeat it.
    posts_before = len(_thread_posts(slack, thread_ts))
    assert escalation.id not in await reminders.run_once(now=created + timedelta(seconds=2 * TIMEOUT))
    await client.services.escalations.drain()
    assert (await _customer_texts(client, "r-1")).count(UNCLAIMED) == 1
    assert len(_thread_posts(slack, thread_ts)) == posts_before
    kinds = [e["kind"] for e in (await client.get(f"/v1/escalations/{escalation.id}", headers=auth("sam"))).json()[
        "events"]]
    assert kinds == ["opened", "reminded"]


@module_loop
async def test_reminders_claimed_escalation_tells_the_customer_nothing(client):
    escalation = await _escalate(client, "r-2")
    claimed = await client.post(f"/v1/escalations/{escalation.id}/claim", headers=auth("sam"))
    assert claimed.status_code == 200
    assert (await client.post(f"/v1/escalations/{escalation.id}/reply", headers=auth("sam"),
                              json={"text": "Sam here."})).status_code == 201

    reminded = await client.services.reminders.run_once(
        now=_aware(escalation.created_at) + timedelta(seconds=10 * TIMEOUT))

    assert escalation.id not in reminded  # answered, and the customer has not written since
    assert UNCLAIMED not in await _customer_texts(client, "r-2")
    async with client.services.sessions() as session:
        row = await session.get(Escalation, escalation.id)
    assert row.reminded_at is None and row.state == "claimed"


@module_loop
async def test_reminders_cover_every_bot_and_wait_for_the_timeout(client):
    response = await client.post("/v1/bots/other/chat", json={"session_id": "r-3", "text": "talk to a human"})
    conversation_id = response.json()["conversation_id"]
    async with client.services.sessions() as session:
        other = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == conversation_id))).scalar_one()
    early = _aware(other.created_at) + timedelta(seconds=TIMEOUT / 2)
    assert other.id not in await client.services.reminders.run_once(now=early)
    assert other.id in await client.services.reminders.run_once(now=early + timedelta(seconds=TIMEOUT))


# ---- exactly once across replicas, on SQLite and PostgreSQL -----------------------------------------

async def test_reminders_two_replicas_remind_each_escalation_once(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 60}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="c1"), contact_id=None)
            opened = await escalations.open_in(session, conversation=conversation, reason="customer asked")
        replicas = [HandoffReminders(sessions, settings=settings, escalations=escalations) for _ in range(2)]
        later = _aware(opened.created_at) + timedelta(seconds=61)

        results = await asyncio.gather(*(r.run_once(now=later) for r in replicas))

        assert sorted(len(r) for r in results) == [0, 1] and [opened.id] in results
        async with sessions() as session:
            notices = (await session.execute(select(Message.text).where(
                Message.conversation_id == conversation.id, Message.text == settings.bot("acme").escalation
                .unclaimed_message))).scalars().all()
            kinds = (await session.execute(select(EscalationEvent.kind).where(
                EscalationEvent.escalation_id == opened.id).order_by(EscalationEvent.id))).scalars().all()
            state = (await session.get(Conversation, conversation.id)).state
        assert len(notices) == 1 and kinds == ["opened", "reminded"] and state == "waiting"
    finally:
        await escalations.drain()
        await engine.dispose()


async def test_reminders_wait_for_business_hours_and_the_timeout_after_opening(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    hours = {"timezone": "UTC", "days": [0, 1, 2, 3, 4], "start": "09:00", "end": "17:00"}
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 600,
                                                              "business_hours": hours}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="late"), contact_id=None)
            opened = await escalations.open_in(session, conversation=conversation, reason="customer asked")
            # Opened on Friday evening, after hours.
            opened.created_at = datetime(2025, 6, 6, 18, 0, tzinfo=timezone.utc)

        saturday = datetime(2025, 6, 7, 12, 0, tzinfo=timezone.utc)
        monday_opening = datetime(2025, 6, 9, 9, 0, tzinfo=timezone.utc)
        # Closed all weekend: the customer was told "Monday at 09:00"; "everyone is busy" would be untrue.
        assert await reminders.run_once(now=saturday) == []
        # Monday morning the team gets its claim timeout before anyone is nagged.
        assert await reminders.run_once(now=monday_opening + timedelta(seconds=300)) == []
        assert await reminders.run_once(now=monday_opening + timedelta(seconds=601)) == [opened.id]
        async with sessions() as session:
            texts = (await session.execute(select(Message.text).where(
                Message.conversation_id == conversation.id).order_by(Message.id))).scalars().all()
        assert texts[-1] == settings.bot("acme").escalation.unclaimed_message
    finally:
        await escalations.drain()
        await engine.dispose()
