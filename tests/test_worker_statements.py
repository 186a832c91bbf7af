"""What a message costs the worker in SQL statements: each one is a round trip on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import select, update

from storage import repositories as repo
from storage.models import Conversation, Message, Usage
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


async def test_a_claim_uses_the_row_as_it_claimed_it_not_as_read_before(migrated_url, monkeypatch):
    """Another caller's attempt can settle between this caller's read and its claim (`deliver` is safe to
    call twice): its `meta` (the parts it delivered, when to try again) is the claimed row's. A refresh
    after the claim read it; the claim's RETURNING left it out, and the parts already out were lost."""
    from sqlalchemy.ext.asyncio import AsyncSession

    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline())
    _conversation_id, _message_id, reply_id = await _with_reply(sessions, inbox, text="the answer")
    read = AsyncSession.get

    async def get_then_another_attempt_fails(self, entity, ident, **kwargs):
        row = await read(self, entity, ident, **kwargs)
        if entity is Message and ident == reply_id:
            monkeypatch.setattr(AsyncSession, "get", read)
            async with sessions() as other, other.begin():  # its part 1 went out, then a 5xx
                await other.execute(update(Message).where(Message.id == reply_id).values(
                    attempts=1, meta={"delivered_parts": ["p0"], "sender": "another replica"}))
        return row

    monkeypatch.setattr(AsyncSession, "get", get_then_another_attempt_fails)
    assert await worker._outbox.deliver(reply_id) == "sent"
    async with sessions() as session:
        reply = await session.get(Message, reply_id)
    assert (reply.attempts, reply.provider_ids, reply.meta.get("sender")) == (2, ["p0", "p1"], "another replica")
    await engine.dispose()


async def test_a_key_of_a_questions_meta_is_set_in_one_statement_keeping_what_changed_meanwhile(migrated_url):
    """A streamed message's id or a tool's run is kept on the question (`MessageHandler._record_meta`): a
    locked read of the row, then the write of its whole `meta`, two statements. One UPDATE merges the key
    into `meta` as stored, so an edit's command committed since the turn read the question stays."""
    engine, sessions, inbox, worker, _adapter = build_worker(migrated_url, EchoPipeline())
    accepted = await inbox.accept("acme", chat_message("erin", 1))
    async with sessions() as session:
        question = await session.get(Message, accepted.message_id)
    read = dict(question.meta)
    async with sessions() as session, session.begin():  # an edit made it a command meanwhile
        await session.execute(update(Message).where(Message.id == question.id)
                              .values(meta={**read, "command": "start"}))
    log = StatementLog(engine)
    run = {"name": "lookup", "result": "Zürich\x00 ✓", "args": {"n": 1.5, "ids": [1, None, True]}}
    await worker.handler._record_meta(question, "tool_runs", run)
    await worker.handler._record_meta(question, "streamed", ["p1"])
    assert [s for s in log.statements if " " in s] == ["UPDATE messages", "UPDATE messages"]
    async with sessions() as session:
        stored = (await session.get(Message, question.id)).meta
    expected = {**read, "command": "start", "streamed": ["p1"],
                "tool_runs": {**run, "result": "Zürich ✓"}}
    assert stored == question.meta == expected
    await engine.dispose()


class _PaidEcho(EchoPipeline):
    """Echoes after two model calls (a follow-up's rewrite and its answer), each a `usage` row."""

    async def handle(self, turn):
        result = await super().handle(turn)
        result.usage = [{"model": model, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.001,
                         "partial": False} for model in ("rewrite", "answer")]
        return result


async def _one_paid_turn_logged(migrated_url: str):
    """(engine, sessions, the question, the statements of its turn) of a question answered by `_PaidEcho`."""
    engine, sessions, inbox, worker, _adapter = build_worker(migrated_url, _PaidEcho(delay=0))
    accepted = await inbox.accept("acme", chat_message("erin", 1))
    async with sessions() as session:
        question = await session.get(Message, accepted.message_id)
    log = StatementLog(engine)
    await worker.handler.handle(question)
    return engine, sessions, question, log


async def test_a_turn_reads_its_conversation_and_sender_in_one_statement(migrated_url):
    """The turn read its conversation, then its sender's contact: two statements before its history's."""
    engine, _sessions, _question, log = await _one_paid_turn_logged(migrated_url)
    assert [s for s in log.statements if " " in s][:3] == [
        "SELECT conversations", "SELECT messages",  # the conversation with its sender; the history
        "UPDATE messages"]  # the attempt counted
    await engine.dispose()


async def test_a_turns_model_calls_are_stored_in_one_insert(migrated_url):
    """Each model call's `usage` row was an INSERT of its own on SQLite (the ORM batches them only where
    the database returns the new ids in order): a follow-up's rewrite and answer, two statements."""
    engine, sessions, question, log = await _one_paid_turn_logged(migrated_url)
    assert log.counts()["INSERT usage"] == 1
    async with sessions() as session:
        usage = (await session.execute(select(Usage).order_by(Usage.id))).scalars().all()
    assert [(u.model, u.message_id, u.conversation_id, u.prompt_tokens, u.cost_usd, u.partial, u.created_at is not None)
            for u in usage] == [(model, question.id, question.conversation_id, 10, 0.001, False, True)
                                for model in ("rewrite", "answer")]
    await engine.dispose()


async def test_a_key_is_set_on_a_questions_meta_holding_what_a_platform_shared_with_a_nul(migrated_url):
    """What a platform shared (a WhatsApp place's label, a form field) was kept in `meta` as sent, NUL
    included, which PostgreSQL's `json` takes as `\\u0000` and its `jsonb` refuses: the one-statement merge
    casts `meta` to `jsonb`, so a streamed answer or a tool's run on such a question failed the turn."""
    import dataclasses

    engine, sessions, inbox, worker, _adapter = build_worker(migrated_url, EchoPipeline())
    shared = {"place": {"label": "Gate\x00 7", "latitude": 1.5}}
    accepted = await inbox.accept("acme", dataclasses.replace(chat_message("erin", 1), raw={"shared": shared}))
    async with sessions() as session:
        question = await session.get(Message, accepted.message_id)
    await worker.handler._record_meta(question, "streamed", ["p1"])
    async with sessions() as session:
        stored = (await session.get(Message, question.id)).meta
    assert (stored["streamed"], stored["shared"]) == (["p1"], {"place": {"label": "Gate 7", "latitude": 1.5}})
    await engine.dispose()
