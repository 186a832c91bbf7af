"""What a message costs the worker in SQL statements: each one is a round trip on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import update

from storage import repositories as repo
from storage.models import Conversation, Message
from tests.statement_log import StatementLog
from tests.worker_rig import EchoPipeline, build_worker, chat_message


async def _with_reply(sessions, inbox, *, text: str) -> tuple[int, int, int]:
    """A customer's pending message and a pending reply to it: (conversation, message, reply) ids."""
    accepted = await inbox.accept("acme", chat_message("erin", 1))
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, accepted.conversation_id)
        reply = await repo.add_outbound(session, conversation=conversation, text=text, reply_to_id=accepted.message_id)
    return accepted.conversation_id, accepted.message_id, reply.id


async def test_the_next_pending_message_is_found_in_one_statement_unsent_replies_first(migrated_url):
    """It took one statement per direction, and the worker asks twice a message (to take it, then to
    find the conversation done): four round trips, now two."""
    engine, sessions, inbox, _worker, _adapter = build_worker(migrated_url, EchoPipeline())
    conversation_id, message_id, reply_id = await _with_reply(sessions, inbox, text="an earlier reply")
    log = StatementLog(engine)
    found = []
    for settled, status in ((reply_id, "sent"), (message_id, "done"), (None, None)):
        log.clear()
        async with sessions() as session:
            message = await repo.next_pending(session, conversation_id=conversation_id)
        found.append((message.id if message else None, list(log.statements)))
        if settled is not None:
            async with sessions() as session, session.begin():
                await session.execute(update(Message).where(Message.id == settled).values(status=status))
    assert found == [(reply_id, ["SELECT messages"]), (message_id, ["SELECT messages"]), (None, ["SELECT messages"])]
    await engine.dispose()


async def test_a_reply_is_claimed_sent_and_recorded_in_five_statements(migrated_url):
    """The claim returns what it changed (a refresh read the row again), and the conversation, its
    contact and the message replied to come in one read (they were three): eight statements before."""
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline())
    _conversation_id, _message_id, reply_id = await _with_reply(sessions, inbox, text="the answer")
    log = StatementLog(engine)
    assert await worker._outbox.deliver(reply_id) == "sent"
    assert [s for s in log.statements if " " in s] == [
        "SELECT messages", "UPDATE messages", "SELECT conversations", "UPDATE messages", "INSERT deliveries"]
    async with sessions() as session:
        reply = await session.get(Message, reply_id)
    assert adapter.sent == [("erin", "the answer")]
    assert (reply.status, reply.attempts, reply.provider_ids) == ("sent", 1, ["p1"])
    await engine.dispose()
