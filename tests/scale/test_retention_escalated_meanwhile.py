"""`gateway forget` and the retention purge when an escalation opens in their conversations between the lock of
their escalations and their own, on every attempt: a bounded number of tries, each logged, then an error, never a
loop that runs for ever."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from structlog.testing import capture_logs

from gateway.errors import Conflict
from gateway.retention import ESCALATED_MEANWHILE_ATTEMPTS, forget_contact, purge_expired
from storage.models import Conversation, Escalation
from tests.pausing import locks_or_writes
from tests.scale.test_retention import _count, _expired_web_conversation, _purge_rig, _store


def _escalating_each_time(engine, conversation: int) -> async_sessionmaker[AsyncSession]:
    """Sessions that open an escalation in `conversation` right after each lock of the escalations: "escalated
    meanwhile" on every attempt. On PostgreSQL another transaction opens it (an operator's takeover, committed);
    SQLite's write lock, taken by the first lock, keeps every other writer out, so there it is opened in the
    same transaction (rolled back with it)."""
    other = async_sessionmaker(engine, expire_on_commit=False)

    class Escalating(AsyncSession):
        async def execute(self, statement, *args, **kwargs):
            result = await super().execute(statement, *args, **kwargs)
            if isinstance(statement, Select) and locks_or_writes(statement, "escalations"):
                opened = Escalation(conversation_id=conversation, bot="acme", reason="took it over")
                if engine.dialect.name == "postgresql":
                    async with other() as session, session.begin():
                        session.add(opened)
                else:
                    self.add(opened)
                    await self.flush()
            return result

    return async_sessionmaker(engine, class_=Escalating, expire_on_commit=False)


async def test_forget_gives_up_with_an_error_when_an_escalation_opens_on_every_attempt(migrated_url):
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        conversation = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        with capture_logs() as logs, pytest.raises(Conflict, match="run it again"):
            await asyncio.wait_for(forget_contact(_escalating_each_time(engine, conversation),
                                                  channel="telegram", user="4242"), 30)
        retried = [e for e in logs if e["event"] == "retention.escalated_meanwhile"]
        assert len(retried) == ESCALATED_MEANWHILE_ATTEMPTS
        assert all(e["log_level"] == "warning" and e["job"] == "forget" for e in retried)
        assert await _count(sessions, Conversation, Conversation.id == conversation) == 1  # nothing half-erased


async def test_retention_stops_a_bots_purge_with_an_error_when_an_escalation_opens_on_every_attempt(migrated_url):
    bots = [{"name": "acme", "retention_days": 30}, {"name": "beta", "retention_days": 30}]
    async with _purge_rig(migrated_url, bots=bots) as (engine, sessions, settings):
        conversation = await _expired_web_conversation(sessions, "s-old")
        with capture_logs() as logs:
            report = await asyncio.wait_for(purge_expired(_escalating_each_time(engine, conversation), settings), 30)
        assert report.conversations == 0
        retried = [e for e in logs if e["event"] == "retention.escalated_meanwhile"]
        assert len(retried) == ESCALATED_MEANWHILE_ATTEMPTS
        assert all(e["job"] == "purge" and e["bot"] == "acme" for e in retried)
        stopped = [e for e in logs if e["event"] == "retention.purge_stopped"]
        assert [(e["log_level"], e["bot"]) for e in stopped] == [("error", "acme")]
        assert await _count(sessions, Conversation, Conversation.id == conversation) == 1
