"""A reply whose row is erased while it is sent: the log says which erased it (`gateway forget`, or the retention
purge), and the mark of a chat that outlives the person (a group) is kept as for any reply."""

from __future__ import annotations

from datetime import timedelta

import pytest
import structlog
from sqlalchemy import select, update

from gateway.delivery.record import record_outcome
from gateway.models import utcnow
from gateway.retention import forget_contact, purge_expired
from storage.models import Conversation, Message, RemovedChat
from tests.scale.test_forget_groups import _says
from tests.scale.test_retention import _age_everything, _purge_rig


async def _sending(sessions, conversation: int) -> Message:
    """The conversation's reply, claimed for its send now (`Outbox.deliver`)."""
    async with sessions() as session, session.begin():
        reply = (await session.execute(select(Message).where(Message.conversation_id == conversation,
                                                             Message.direction == "out"))).scalar_one()
        reply.status, reply.updated_at = "sending", utcnow()
    return reply


async def _record(sessions, reply: Message, *, chat: str, status: str = "sent", removed_at=None, removed_since=None):
    """Record the send's outcome as the outbox does; the events it logged."""
    with structlog.testing.capture_logs() as logs:
        await record_outcome(sessions, reply, chat=chat, status=status, error=None, meta={}, provider_ids=["7"],
                             removed_at=removed_at, opted_out_contact=None, removed_since=removed_since,
                             bound=structlog.get_logger())
    return [e["event"] for e in logs]


async def test_a_reply_whose_conversation_the_retention_purge_deleted_meanwhile_is_not_logged_as_forgotten(
        migrated_url):
    async with _purge_rig(migrated_url) as (_, sessions, settings):
        gone = await _says(sessions, who="4242", chat="4242", text="where is my order")
        await _age_everything(sessions, utcnow() - timedelta(days=45))
        reply = await _sending(sessions, gone)  # a retry of a reply queued before the platform's long outage
        async with sessions() as session, session.begin():
            await session.execute(update(Message).where(Message.id == reply.id)
                                  .values(created_at=utcnow() - timedelta(days=45)))
        assert (await purge_expired(sessions, settings)).conversations == 1
        assert await _record(sessions, reply, chat="4242") == ["outbound.purged"]


@pytest.mark.parametrize("outcome", ["refused: bot removed", "sent: bot back"])
async def test_a_reply_to_a_forgotten_group_member_still_marks_the_groups_chat(migrated_url, outcome):
    # The chat is the group's, not the member's: a send refused there as "bot was kicked" marks it for the
    # others' replies, and one that went out ends the mark it read, as for any reply.
    async with _purge_rig(migrated_url) as (_, sessions, _settings):
        group = await _says(sessions, who="alice", chat="-100shop", text="where is my order")
        await _says(sessions, who="bob", chat="-100shop", text="mine too")
        marked = utcnow() - timedelta(hours=1)
        async with sessions() as session, session.begin():
            if outcome.startswith("sent"):
                session.add(RemovedChat(bot="acme", channel="telegram", chat="-100shop", removed_at=marked))
            reply = (await session.execute(select(Message).where(
                Message.conversation_id == group, Message.text == "about where is my order"))).scalar_one()
            reply.status, reply.updated_at = "sending", utcnow()
        await forget_contact(sessions, channel="telegram", user="alice")
        if outcome.startswith("refused"):
            events = await _record(sessions, reply, chat="-100shop", status="failed", removed_since=utcnow())
        else:
            events = await _record(sessions, reply, chat="-100shop", removed_at=marked)
        assert events == ["outbound.forgotten"]
        async with sessions() as session:
            assert await session.get(Conversation, group) is not None  # bob's, still
            marks = list((await session.execute(select(RemovedChat.chat))).scalars())
        assert marks == (["-100shop"] if outcome.startswith("refused") else [])
