"""`gateway forget` between the worker's read of the contact's message and the send of its answer: the turn in
hand ends quietly, nothing is sent to the forgotten person, and the worker goes on with the others."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from sqlalchemy import func, select

from gateway.delivery.record import record_outcome
from gateway.pipeline import PipelineResult
from gateway.retention import forget_contact
from storage import repositories as repo
from storage.meta_keys import set_meta_key
from storage.models import Contact, Conversation, Delivery, Message
from tests.worker_rig import (
    EchoPipeline,
    RecordingAdapter,
    WithSessions,
    build_worker,
    chat_message,
    until_waiting_for_a_lock,
)


async def left_of_alice(sessions) -> list[int]:
    """Alice's conversations, the messages that name her, and her contact rows."""
    async with sessions() as session:
        return [(await session.execute(select(func.count()).select_from(model).where(where))).scalar_one()
                for model, where in ((Conversation, Conversation.chat == "alice"),
                                     (Message, Message.text.contains("alice")),
                                     (Contact, Contact.external_id == "alice"))]


async def alice_then_bob_answered(inbox, worker) -> list[dict]:
    """Alice's message, then Bob's, accepted and the worker run until idle; what it logged meanwhile."""
    await inbox.accept("acme", chat_message("alice", 0))
    await inbox.accept("acme", chat_message("bob", 0))
    with structlog.testing.capture_logs() as logs:
        await worker.run_until_idle(timeout=30)
    return logs


class ForgetMidTurn(WithSessions, EchoPipeline):
    """Answers as EchoPipeline does, but alice's turn asks for her data to be erased while the model writes."""

    linger = 0.0  # seconds the model goes on writing after the forget

    async def handle(self, turn):
        if turn.text.startswith("alice"):
            await forget_contact(self.sessions, channel="web", user="alice")
            await asyncio.sleep(self.linger)
            return PipelineResult(reply="your order ships tomorrow, alice")
        return await super().handle(turn)


class ForgetMidALongTurn(ForgetMidTurn):
    """ForgetMidTurn whose model goes on writing longer than a heartbeat of a 0.3 s lease."""

    linger = 0.5


async def test_a_contact_forgotten_while_their_message_is_answered_gets_nothing_and_nothing_crashes(migrated_url):
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, ForgetMidTurn)
    try:
        logs = await alice_then_bob_answered(inbox, worker)
        assert [text for _, text in adapter.sent] == ["echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception")] == []
        assert await left_of_alice(sessions) == [0, 0, 0]
    finally:
        await engine.dispose()


async def test_a_conversation_forgotten_during_a_turn_longer_than_a_heartbeat_is_not_reported_as_a_lost_lease(
        migrated_url):
    # The heartbeat's renewal finds no conversation to lease: that is the forget, not another worker taking it.
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, ForgetMidALongTurn, lease=0.3)
    try:
        logs = await alice_then_bob_answered(inbox, worker)
        assert [text for _, text in adapter.sent] == ["echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception", "warning")] == []
    finally:
        await engine.dispose()


def forget_alice_first(sessions, step):
    """`step` (taking alice's message, or the id of her reply), with alice forgotten just before it runs."""
    async def forgetting(message, *args, **kwargs):
        if isinstance(message, int):
            async with sessions() as session:
                reply = await session.get(Message, message)
            ours = reply is not None and reply.text.startswith("echo: alice")
        else:
            ours = message.text.startswith("alice")
        if ours:
            await forget_contact(sessions, channel="web", user="alice")
        return await step(message, *args, **kwargs)
    return forgetting


@pytest.mark.parametrize("step", ["handle", "_count_attempt", "deliver"])
async def test_a_contact_forgotten_after_the_worker_read_their_message_gets_nothing_and_nothing_crashes(
        migrated_url, step):
    # Forgotten between the worker's read of the message and the turn's start: its conversation is gone when
    # the turn reads it (`handle`), or when it counts its attempt (`_count_attempt`); or once the answer is
    # stored, before it is sent (`deliver`).
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline())
    owner = worker.handler._outbox if step == "deliver" else worker.handler
    setattr(owner, step, forget_alice_first(sessions, getattr(owner, step)))
    try:
        logs = await alice_then_bob_answered(inbox, worker)
        assert [text for _, text in adapter.sent] == ["echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception", "warning")] == []
        assert await left_of_alice(sessions) == [0, 0, 0]
    finally:
        await engine.dispose()


class ForgettingWhileSending(WithSessions, RecordingAdapter):
    """Sends as RecordingAdapter does, but alice is forgotten while her reply is on its way to her."""

    async def send(self, message):
        if message.conversation.chat == "alice":
            await forget_contact(self.sessions, channel="web", user="alice")
        return await super().send(message)


async def test_a_contact_forgotten_while_their_reply_is_sent_gets_it_and_nothing_is_logged_as_an_error(migrated_url):
    # The platform has the reply; its row is gone before the send is recorded (the deliveries' foreign key).
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(),
                                                            adapter=ForgettingWhileSending)
    try:
        logs = await alice_then_bob_answered(inbox, worker)
        assert sorted(text for _, text in adapter.sent) == ["echo: alice #0", "echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception", "warning")] == []
        assert [e["message_id"] for e in logs if e["event"] == "outbound.forgotten"] != []
        assert await left_of_alice(sessions) == [0, 0, 0]
    finally:
        await engine.dispose()


class PartRecordedTwice(WithSessions, RecordingAdapter):
    """Sends, but its part's delivery is already stored for the reply (a constraint the record then breaks)."""

    async def send(self, message):
        async with self.sessions() as session, session.begin():
            session.add(Delivery(message_id=int(message.idempotency_key[1:]), channel="web", provider_id="p1"))
        return await super().send(message)


async def test_a_reply_whose_parts_cannot_be_recorded_is_still_an_error_when_it_was_not_forgotten(migrated_url):
    engine, sessions, inbox, worker, _ = build_worker(migrated_url, EchoPipeline(), adapter=PartRecordedTwice)
    try:
        await inbox.accept("acme", chat_message("bob", 0))
        with structlog.testing.capture_logs() as logs:
            await worker.run_until_idle(timeout=30)
        assert [e["event"] for e in logs if e["log_level"] == "error"] == ["outbound.parts_not_recorded"]
        async with sessions() as session:
            reply = (await session.execute(select(Message).where(Message.direction == "out"))).scalar_one()
        assert (reply.status, reply.provider_ids) == ("sent", ["p1"])
    finally:
        await engine.dispose()


class ForgottenAsTheLeftoverGoes(WithSessions, RecordingAdapter):
    """Deletes messages; alice is forgotten while the partial stream of her dead attempt is deleted."""

    async def delete(self, conversation, provider_id):
        await forget_contact(self.sessions, channel="web", user="alice")


class ForgetBeforeAToolRun(WithSessions, EchoPipeline):
    """Alice's turn has her forgotten, then runs a tool, which the turn's journal saves on her message."""

    async def handle(self, turn):
        if turn.text.startswith("alice"):
            await forget_contact(self.sessions, channel="web", user="alice")
            await turn.tool_journal.record("lookup", {"order": 1}, result="ships", error=None, escalate=None)
        return await super().handle(turn)


@pytest.mark.parametrize("where", ["leftover stream", "tool run"])
async def test_a_contact_forgotten_while_their_turn_keeps_what_a_retry_must_know_ends_the_turn_quietly(
        migrated_url, where):
    # What a later attempt must know is kept on the message (`_record_meta`): a retried attempt clearing the
    # stream a dead one left, or a tool's run, with the message gone by then.
    pipeline = ForgetBeforeAToolRun if where == "tool run" else EchoPipeline()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline, adapter=ForgottenAsTheLeftoverGoes)
    worker.handler._adapters = {("acme", "web"): adapter}  # a turn removes the leftover through its channel
    try:
        alice = await inbox.accept("acme", chat_message("alice", 0))
        await inbox.accept("acme", chat_message("bob", 0))
        if where == "leftover stream":
            async with sessions() as session, session.begin():
                await set_meta_key(session, message_id=alice.message_id, key="streamed", value=["s1"])
        with structlog.testing.capture_logs() as logs:
            await worker.run_until_idle(timeout=30)
        assert [text for _, text in adapter.sent] == ["echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception", "warning")
                and e["event"] != "stream.interrupted_attempt"] == []
        assert [e["event"] for e in logs if e["event"] == "inbound.forgotten"] == ["inbound.forgotten"]
        assert await left_of_alice(sessions) == [0, 0, 0]
    finally:
        await engine.dispose()


async def test_forget_waits_for_a_turn_being_stored_instead_of_deadlocking(engine, sessions):
    # A turn's store locks the conversation, then the message (`MessageHandler._finish`); `forget` deleted the
    # messages, then waited for the conversation: "deadlock detected" on PostgreSQL, one of the two aborted.
    async with sessions() as session, session.begin():
        stored = await repo.store_inbound(session, bot="acme", message=chat_message("alice", 0))
    finishing = sessions()
    await finishing.begin()
    await finishing.get(Conversation, stored.conversation_id, with_for_update={"key_share": True})
    forget = asyncio.create_task(forget_contact(sessions, channel="web", user="alice"))
    await until_waiting_for_a_lock(engine)  # `forget` has read alice's conversation and waits on the turn's lock
    message = await asyncio.wait_for(finishing.get(Message, stored.message_id, with_for_update=True), 30)
    message.status = "done"
    await finishing.commit()
    await finishing.close()
    report = await asyncio.wait_for(forget, 30)
    assert (report.conversations, report.messages) == (1, 1)
    assert await left_of_alice(sessions) == [0, 0, 0]


async def test_forget_while_a_template_sent_in_place_of_a_reply_is_recorded_waits_instead_of_deadlocking(
        engine, sessions, monkeypatch):
    # Recording a WhatsApp template sent in place of a reply updates the reply's row, then its conversation
    # (`mark_held_behind_template`); forget locks the conversation, then deletes its messages.
    held, forgetting = repo.mark_held_behind_template, []

    async def held_as_alice_is_forgotten(session, conversation_id, *, reply_id):
        if not forgetting:
            forgetting.append(asyncio.create_task(forget_contact(sessions, channel="web", user="alice")))
            await until_waiting_for_a_lock(engine)  # forget has locked what it could, and waits for the rest
        await held(session, conversation_id, reply_id=reply_id)

    monkeypatch.setattr(repo, "mark_held_behind_template", held_as_alice_is_forgotten)
    async with sessions() as session, session.begin():
        stored = await repo.store_inbound(session, bot="acme", message=chat_message("alice", 0))
        reply = Message(conversation_id=stored.conversation_id, bot="acme", channel="web", direction="out",
                        author="bot", text="echo: alice #0", status="sending", reply_to_id=stored.message_id)
        session.add(reply)
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(record_outcome(
            sessions, reply, chat="alice", status="sent", error=None, meta={"template": "reengage"},
            provider_ids=["p1"], removed_at=None, opted_out_contact=None, removed_since=None,
            bound=structlog.get_logger()), 30)
        report = await asyncio.wait_for(forgetting[0], 30)
    assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception", "warning")] == []
    assert (report.conversations, report.messages) == (1, 2)
    assert await left_of_alice(sessions) == [0, 0, 0]
