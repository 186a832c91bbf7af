"""An escalation opened shortly before the team's day ends, unclaimed at closing: the customer is told when a
person is back. Why: they had heard "a person will reply here shortly" (opened within business hours, so no
off-hours note), and the reminders skip every closed hour: nothing more reached them until the claim timeout
had passed again after the next opening, a whole weekend later."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import event as sa_event
from sqlalchemy import func, select

from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.models import ConversationRef
from gateway.operators.reminders import HandoffReminders
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Escalation, EscalationEvent, Message

HOURS = {"timezone": "UTC", "days": [0, 1, 2, 3, 4], "start": "09:00", "end": "17:00"}


async def test_an_escalation_unclaimed_at_closing_tells_the_customer_when_a_person_is_back(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 600, "business_hours": HOURS}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="closing"), contact_id=None)
            opened = await escalations.open_in(session, conversation=conversation, reason="customer asked")
            opened.created_at = datetime(2025, 6, 6, 16, 55, tzinfo=timezone.utc)  # Friday, within hours

        async def texts() -> list[str]:
            async with sessions() as session:
                return list((await session.execute(select(Message.text).where(
                    Message.conversation_id == conversation.id).order_by(Message.id))).scalars().all())

        before = await texts()
        assert await reminders.run_once(now=datetime(2025, 6, 6, 17, 2, tzinfo=timezone.utc)) == []
        assert await texts() == before  # closed, but the timeout has not passed yet
        await reminders.run_once(now=datetime(2025, 6, 6, 17, 6, tzinfo=timezone.utc))
        await reminders.run_once(now=datetime(2025, 6, 7, 12, 0, tzinfo=timezone.utc))  # once, not each run
        told = (await texts())[len(before):]
        assert len(told) == 1 and "Monday at 09:00" in told[0] and "offline" in told[0]

        # Monday the team still gets its claim timeout, and then the usual reminder.
        monday = datetime(2025, 6, 9, 9, 0, tzinfo=timezone.utc)
        assert await reminders.run_once(now=monday + timedelta(seconds=601)) == [opened.id]
        assert (await texts())[-1] == settings.bot("acme").escalation.unclaimed_message
        async with sessions() as session:
            kinds = (await session.execute(select(EscalationEvent.kind).where(
                EscalationEvent.escalation_id == opened.id).order_by(EscalationEvent.id))).scalars().all()
        assert kinds == ["opened", "after_hours", "reminded"]
    finally:
        await escalations.drain()
        await engine.dispose()


async def test_a_claim_released_after_closing_tells_the_customer_when_a_person_is_back(migrated_url):
    """Released after closing (the holder signs out on their way home: Sign out asks to release their claims), the
    customer, told a person had joined, heard nothing: the wait began off hours, which was taken to mean the
    escalation's acknowledgement had said when a person is back; a release says nothing to the customer."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 600, "business_hours": HOURS}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="signed-out"), contact_id=None)
            opened = await escalations.open_in(session, conversation=conversation, reason="customer asked")
            opened.created_at = datetime(2025, 6, 6, 15, 0, tzinfo=timezone.utc)  # Friday, within hours
        await escalations.claim(opened.id, operator="sam", bots=None)
        await escalations.release(opened.id, operator="sam", bots=None, reason="signed out")
        async with sessions() as session, session.begin():  # at 17:20, after closing
            (await session.get(Escalation, opened.id)).waiting_since = datetime(2025, 6, 6, 17, 20, tzinfo=timezone.utc)
            before = (await session.execute(select(func.count(Message.id)).where(
                Message.conversation_id == conversation.id))).scalar_one()

        await reminders.run_once(now=datetime(2025, 6, 6, 17, 31, tzinfo=timezone.utc))
        await reminders.run_once(now=datetime(2025, 6, 7, 12, 0, tzinfo=timezone.utc))
        async with sessions() as session:
            told = (await session.execute(select(Message.text).where(
                Message.conversation_id == conversation.id).order_by(Message.id).offset(before))).scalars().all()
        assert len(told) == 1 and "Monday at 09:00" in told[0]
    finally:
        await escalations.drain()
        await engine.dispose()


async def test_escalations_told_at_closing_are_not_locked_again_every_run(migrated_url):
    """Once told, each escalation was read under its row lock again by every run (every 30 s) all weekend, to find
    its note sent already: a backlog at closing (a model outage hands every conversation over) cost thousands of
    write transactions (SQLite: BEGIN IMMEDIATE, each holding the database's one write lock) each run. The told
    ones are now left out by the query itself."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 600, "business_hours": HOURS}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        async with sessions() as session, session.begin():
            for i in range(3):
                conversation = await repo.get_or_create_conversation(
                    session, bot="acme", ref=ConversationRef(channel="web", chat=f"backlog-{i}"), contact_id=None)
                opened = await escalations.open_in(session, conversation=conversation, reason="model outage")
                opened.created_at = datetime(2025, 6, 6, 16, 50, tzinfo=timezone.utc)  # Friday, within hours
        await reminders.run_once(now=datetime(2025, 6, 6, 17, 6, tzinfo=timezone.utc))
        async with sessions() as session:
            told = (await session.execute(select(func.count()).where(EscalationEvent.kind == "after_hours"))).scalar_one()
        assert told == 3

        statements: list[str] = []

        def seen(conn, cursor, statement, parameters, context, executemany):
            statements.append(statement)

        sa_event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            await reminders.run_once(now=datetime(2025, 6, 6, 17, 36, tzinfo=timezone.utc))
        finally:
            sa_event.remove(engine.sync_engine, "before_cursor_execute", seen)
        assert len(statements) == 1, statements  # the one query, none of them read again
    finally:
        await escalations.drain()
        await engine.dispose()


async def test_an_escalation_reminded_before_closing_is_told_when_a_person_is_back(migrated_url):
    """Unclaimed for the timeout before closing, the customer heard "everyone is busy… a person will reply here",
    and then, once closed, nothing all weekend: the after-hours note was kept for waits never reminded."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claim_timeout_seconds": 600, "business_hours": HOURS}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="reminded"), contact_id=None)
            opened = await escalations.open_in(session, conversation=conversation, reason="customer asked")
            opened.created_at = datetime(2025, 6, 6, 16, 0, tzinfo=timezone.utc)  # Friday, within hours
        async with sessions() as session:  # the acknowledgement (and the note of the real clock's hours)
            before = (await session.execute(select(func.count(Message.id)).where(
                Message.conversation_id == conversation.id))).scalar_one()
        assert await reminders.run_once(now=datetime(2025, 6, 6, 16, 11, tzinfo=timezone.utc)) == [opened.id]
        await reminders.run_once(now=datetime(2025, 6, 6, 17, 1, tzinfo=timezone.utc))
        await reminders.run_once(now=datetime(2025, 6, 7, 12, 0, tzinfo=timezone.utc))
        async with sessions() as session:
            said = (await session.execute(select(Message.text).where(
                Message.conversation_id == conversation.id).order_by(Message.id).offset(before))).scalars().all()
        assert said[0] == settings.bot("acme").escalation.unclaimed_message
        assert len(said) == 2 and "Monday at 09:00" in said[1]
    finally:
        await escalations.drain()
        await engine.dispose()
