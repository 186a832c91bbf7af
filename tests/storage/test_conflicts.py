"""A transaction PostgreSQL aborts to break a deadlock is run again, not answered 500 and lost.

The abort is PostgreSQL's own: a trigger raises SQLSTATE 40P01 (deadlock_detected) the first time a
row is written, as the deadlock detector would, through the real driver and SQLAlchemy."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender
from storage.conflicts import run_again_on_conflict
from storage.engine import create_engine, session_factory
from storage.models import Message
from tests.conftest import upgrade

ABORTS = (
    # A sequence, since the aborted transaction rolls back everything else it wrote.
    "CREATE SEQUENCE {table}_tried",
    """CREATE FUNCTION abort_{table}_as_deadlock() RETURNS trigger AS $$
    BEGIN
      IF nextval('{table}_tried') <= {times} THEN
        RAISE EXCEPTION 'deadlock detected (test)' USING ERRCODE = 'deadlock_detected';
      END IF;
      RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER abort_first BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION abort_{table}_as_deadlock()",
)


async def abort_first(connection, *, times: int, table: str = "messages", event: str = "INSERT") -> None:
    """The first `times` writes (`event`) of a row of `table` are aborted as PostgreSQL aborts a deadlock's
    victim; `SELECT last_value FROM <table>_tried` counts the writes tried."""
    for statement in ABORTS:
        await connection.execute(text(statement.format(table=table, times=times, event=event)))


async def _aborting(postgres_url: str, *, times: int):
    await asyncio.to_thread(upgrade, postgres_url)
    engine = create_engine(postgres_url)
    async with engine.begin() as connection:
        await abort_first(connection, times=times)
    return engine


async def _inserts_tried(session) -> int:
    return (await session.execute(text("SELECT last_value FROM messages_tried"))).scalar_one()


def _message(external_id: str) -> InboundMessage:
    return InboundMessage(channel="whatsapp", external_id=external_id,
                          conversation=ConversationRef(channel="whatsapp", chat="whatsapp:+15550001"),
                          sender=Sender(external_id="whatsapp:+15550001"), text="where is my order?")


async def test_a_message_whose_store_postgres_aborted_for_a_deadlock_is_stored_once(postgres_url):
    engine = await _aborting(postgres_url, times=1)
    sessions = session_factory(engine)
    woken: list[int] = []
    accepted = await Inbox(sessions, on_stored=woken.append).accept("acme", _message("SM1"))
    assert accepted is not None and not accepted.duplicate
    async with sessions() as session:
        assert (await session.execute(select(func.count()).select_from(Message))).scalar_one() == 1
        assert await _inserts_tried(session) == 2  # aborted once, then stored
    assert woken == [accepted.conversation_id]
    await engine.dispose()


async def test_a_conflict_that_lasts_is_raised_and_other_errors_are_not_retried(postgres_url):
    engine = await _aborting(postgres_url, times=100)
    sessions = session_factory(engine)
    with pytest.raises(DBAPIError) as raised:
        await Inbox(sessions).accept("acme", _message("SM2"))
    assert raised.value.orig.sqlstate == "40P01"
    async with sessions() as session:
        assert await _inserts_tried(session) == 4  # every attempt aborted

    calls = 0

    async def wrong_query() -> None:
        nonlocal calls
        calls += 1
        async with sessions() as session:
            await session.execute(text("SELECT no_such_column FROM messages"))

    with pytest.raises(DBAPIError):
        await run_again_on_conflict(wrong_query, what="test")
    assert calls == 1
    await engine.dispose()
