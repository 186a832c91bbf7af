"""The worker when a turn fails: a crash or a turn past its deadline becomes one failure reply that keeps
what the turn spent and did, and a process that dies mid-answer leaves every message to be answered
once after the restart, its finished tool calls replayed rather than run again."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import structlog
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from gateway.pipeline import PipelineResult
from storage.models import Conversation, Message, Usage
from tests.gateway_channels.conftest import wait_until
from tests.worker_rig import EchoPipeline, answer_one, build_worker, chat_message, kill_worker, worker_settings


async def test_worker_crash_in_pipeline_becomes_logged_failure_reply(migrated_url):
    pipeline = EchoPipeline(crash_on="alice #1")
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    for n in range(3):
        await inbox.accept("acme", chat_message("alice", n))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        inbound = (await session.execute(select(Message).where(Message.direction == "in").order_by(Message.id))).scalars().all()
    assert [m.status for m in inbound] == ["done", "failed", "done"]
    assert "something went wrong" in adapter.sent[1][1]  # never silence, never a stack trace
    assert "boom" not in adapter.sent[1][1]
    assert adapter.sent[2][1] == "echo: alice #2"  # the conversation kept going
    await engine.dispose()


async def test_worker_turn_past_its_deadline_is_handed_off_keeping_what_it_spent(migrated_url):
    # A turn stuck in a model call (retries and fallbacks multiply each call's own timeout) must not keep
    # the customer waiting: past worker.turn_timeout it is stopped, and what it spent and did is stored.
    pipeline = EchoPipeline(delay=0)
    echo = pipeline.handle

    async def stuck_on_alice_1(turn):
        if turn.text != "alice #1":
            return await echo(turn)
        turn.record.usage.append({"model": "primary", "prompt_tokens": 120, "completion_tokens": 0,
                                  "cost_usd": 0.001, "partial": False})
        turn.record.tool_calls.append({"round": 1, "id": "c1", "name": "lookup", "arguments": {},
                                       "result": {"status": "open"}})
        await asyncio.sleep(3600)

    pipeline.handle = stuck_on_alice_1
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline,
                                                      settings=worker_settings(turn_timeout=0.3))
    for n in range(3):
        await inbox.accept("acme", chat_message("alice", n))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        messages = (await session.execute(select(Message).order_by(Message.id))).scalars().all()
        usage = (await session.execute(select(Usage))).scalars().all()
    inbound = [m for m in messages if m.direction == "in"]
    assert [m.status for m in inbound] == ["done", "failed", "done"]
    assert "worker.turn_timeout" in inbound[1].error
    assert "something went wrong" in adapter.sent[1][1]
    # The worker is not held by the stuck turn (this one has no escalation service, so the bot answers on).
    assert adapter.sent[2][1] == "echo: alice #2"
    failure = next(m for m in messages if m.reply_to_id == inbound[1].id)
    assert failure.tool_calls[0]["name"] == "lookup"
    assert [(u.message_id, u.prompt_tokens) for u in usage] == [(inbound[1].id, 120)]
    await engine.dispose()


async def test_worker_crash_keeps_the_tool_calls_made_before_it(migrated_url):
    pipeline = EchoPipeline(delay=0)

    async def crash_after_a_tool(turn):
        turn.record.tool_calls.append({"round": 1, "id": "c1", "name": "create_ticket", "arguments": {},
                                       "result": {"ticket": "T-1"}})
        raise RuntimeError("boom")

    pipeline.handle = crash_after_a_tool
    reply, _ = await answer_one(migrated_url, pipeline)
    # The ticket exists: an operator reading the failed turn must see that it was made.
    assert reply.tool_calls == [{"round": 1, "id": "c1", "name": "create_ticket", "arguments": {},
                                 "result": {"ticket": "T-1"}}]


async def test_worker_restart_answers_unanswered_messages_once(migrated_url):
    # First "process": stores three messages, starts answering, and dies mid-answer (its task is
    # cancelled while the pipeline sleeps, and its lease is left behind, as after SIGKILL).
    slow = EchoPipeline(delay=0)
    started = asyncio.Event()

    async def hang(turn):
        started.set()
        await asyncio.sleep(3600)

    slow.handle = hang
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, slow, lease=1.0)
    for n in range(3):
        await inbox.accept("acme", chat_message("alice", n))
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await kill_worker(worker, engine)
    assert adapter.sent == []

    # Second process: a new worker (new owner) takes over once the dead lease expires.
    pipeline = EchoPipeline()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline, lease=1.0)
    await worker.start()
    await worker.run_until_idle(timeout=30)  # polls until nothing is pending: past the dead lease's expiry
    await worker.stop()
    assert [t for _, t in adapter.sent] == ["echo: alice #0", "echo: alice #1", "echo: alice #2"]
    async with sessions() as session:
        outbound = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
    assert len(outbound) == 3 and {m.status for m in outbound} == {"sent"}
    await engine.dispose()


async def test_a_tool_call_an_attempt_finished_is_replayed_after_a_crash_then_forgotten(migrated_url):
    # The first "process" runs a tool and dies writing the answer; the journal it saved on the message
    # is what the next process's attempt replays (gateway/pipeline/tool_journal.py).
    started = asyncio.Event()
    pipeline = EchoPipeline(delay=0)

    keys: list[str] = []

    async def tool_then_hang(turn):
        keys.append(turn.tool_journal.key("create_ticket", {"title": "refund"}))
        await turn.tool_journal.record("create_ticket", {"title": "refund"}, result={"ticket": "T-1"},
                                       error=None, escalate=None)
        started.set()
        await asyncio.sleep(3600)

    pipeline.handle = tool_then_hang
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline, lease=1.0)
    await inbox.accept("acme", chat_message("alice", 0))
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await kill_worker(worker, engine)

    replayed: list = []
    retry = EchoPipeline(delay=0)

    async def replay(turn):
        keys.append(turn.tool_journal.key("create_ticket", {"title": "refund"}))
        replayed.append(turn.tool_journal.replay("create_ticket", {"title": "refund"}))
        return PipelineResult(reply="Ticket T-1 is open.")

    retry.handle = replay
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, retry, lease=1.0)
    await worker.start()
    await worker.run_until_idle(timeout=30)  # polls until nothing is pending: past the dead lease's expiry
    await worker.stop()
    assert replayed == [{"name": "create_ticket", "arguments": {"title": "refund"}, "result": {"ticket": "T-1"},
                         "error": None, "escalate": None}]
    assert adapter.sent == [("alice", "Ticket T-1 is open.")]
    assert len(keys) == 2 and keys[0] == keys[1]  # the same call has the same idempotency key in both processes
    async with sessions() as session:
        inbound = (await session.execute(select(Message).where(Message.direction == "in"))).scalar_one()
    # Answered, so never attempted again: the journal is not kept beside the reply's own record.
    assert inbound.status == "done" and "tool_runs" not in (inbound.meta or {})
    await engine.dispose()


async def test_a_drain_the_database_ended_is_logged_with_its_conversation_and_taken_again(migrated_url, monkeypatch):
    # A PostgreSQL restart between two messages: reading the next pending message raises. Nothing awaits
    # a drain, so before, asyncio reported it only at garbage collection ("Task exception was never
    # retrieved"), naming no conversation. Its messages must still be answered, once each.
    from gateway import worker as worker_module

    real_next_pending = worker_module.repo.next_pending
    failures = []

    async def next_pending_failing_once(session, *, conversation_id):
        if not failures:
            failures.append(conversation_id)
            raise OperationalError("SELECT", {}, ConnectionError("the database system is starting up"))
        return await real_next_pending(session, conversation_id=conversation_id)

    monkeypatch.setattr(worker_module.repo, "next_pending", next_pending_failing_once)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline())
    for n in range(2):
        await inbox.accept("acme", chat_message("alice", n))
    with structlog.testing.capture_logs() as logs:
        await worker.start()
        for _ in range(200):
            if len(adapter.sent) == 2:
                break
            await asyncio.sleep(0.05)
        await worker.stop()
    failed = [e for e in logs if e["event"] == "worker.drain_failed"]
    assert [(e["conversation_id"], e["error"], e["log_level"]) for e in failed] == [
        (failures[0], "OperationalError", "error")]
    assert [t for _, t in adapter.sent] == ["echo: alice #0", "echo: alice #1"]
    await engine.dispose()


async def test_a_worker_whose_lease_was_taken_stops_draining(migrated_url):
    """Its lease lapsed (a database outage, a stalled process) and another worker took the conversation:
    the first finishes the message in hand, once, and leaves the rest to the new holder instead of
    running the pipeline for each of them a second time."""
    from datetime import timedelta

    from sqlalchemy import update

    from gateway.models import utcnow
    from storage.models import Conversation

    first, second = EchoPipeline(delay=0), EchoPipeline(delay=0)
    in_hand = asyncio.Event()
    echo = first.handle

    async def slow(turn):
        in_hand.set()
        await asyncio.sleep(1.0)
        return await echo(turn)

    async def steady(turn):  # the new holder is still on alice #1 when the first is done with #0
        await asyncio.sleep(0.5)
        return await echo_b(turn)

    echo_b = second.handle
    first.handle, second.handle = slow, steady
    engine_a, sessions, inbox, worker_a, adapter_a = build_worker(migrated_url, first, lease=0.6)
    engine_b, _, _, worker_b, adapter_b = build_worker(migrated_url, second, lease=0.6)
    for n in range(3):
        await inbox.accept("acme", chat_message("alice", n))
    await worker_a._claim_round()
    await asyncio.wait_for(in_hand.wait(), 10)
    async with sessions() as session, session.begin():  # it lapsed (a long outage) and the other took it
        await session.execute(update(Conversation).values(lease_owner=worker_b.owner,
                                                          lease_until=utcnow() + timedelta(seconds=60)))
    with structlog.testing.capture_logs() as logs:
        conversation_id = next(iter(worker_a._active))
        await asyncio.wait_for(worker_b._drain(conversation_id), 30)  # the new holder's drain
        for _ in range(100):
            if not worker_a._active:
                break
            await asyncio.sleep(0.05)
    assert not worker_a._active
    assert [text for _, text in first.seen] == ["alice #0"]  # before: alice #1 and #2 a second time too
    assert [text for _, text in second.seen] == ["alice #0", "alice #1", "alice #2"]
    assert any(e["event"] == "worker.lease_lost" for e in logs)
    async with sessions() as session:
        outbound = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
    assert sorted(m.text for m in outbound) == ["echo: alice #0", "echo: alice #1", "echo: alice #2"]
    await worker_a.stop()
    await worker_b.stop()
    await engine_a.dispose()
    await engine_b.dispose()


async def test_a_message_taken_again_after_a_crash_counts_once_against_the_rate_limit(migrated_url):
    """The limit counted each attempt: with 2 a minute, a customer whose first message outlived a
    crashed worker was refused their second."""
    from gateway.bot_settings import RateLimitSettings
    from gateway.ratelimit import RateLimiter

    limiter = RateLimiter({"acme": RateLimitSettings(per_contact_per_minute=2)})
    started = asyncio.Event()
    slow = EchoPipeline(delay=0)

    async def hang(turn):
        started.set()
        await asyncio.sleep(3600)

    slow.handle = hang
    engine, sessions, inbox, worker, _ = build_worker(migrated_url, slow, lease=1.0)
    worker.handler.rate_limiter = limiter
    await inbox.accept("acme", chat_message("alice", 0))
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await kill_worker(worker, engine)

    pipeline = EchoPipeline(delay=0)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline, lease=1.0)
    worker.handler.rate_limiter = limiter
    await worker.run_until_idle(timeout=30)  # polls until nothing is pending: past the dead lease's expiry
    await inbox.accept("acme", chat_message("alice", 1))
    await worker.run_until_idle(timeout=30)
    assert [t for _, t in adapter.sent] == ["echo: alice #0", "echo: alice #1"]
    await engine.dispose()


async def test_a_message_whose_attempts_all_died_is_given_up_with_the_failure_reply(migrated_url):
    from sqlalchemy import update

    from gateway.message_handler import MAX_TURN_ATTEMPTS
    from tests.english_replies import FAILURE_REPLY

    pipeline = EchoPipeline(delay=0)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    stored = await inbox.accept("acme", chat_message("alice", 0))
    async with sessions() as session, session.begin():  # five processes died in it before
        await session.execute(update(Message).where(Message.id == stored.message_id).values(attempts=MAX_TURN_ATTEMPTS))
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        inbound = await session.get(Message, stored.message_id)
    assert pipeline.seen == [] and inbound.status == "failed" and "gave up after 5 attempts" in inbound.error
    assert adapter.sent == [("alice", FAILURE_REPLY)]
    await engine.dispose()


async def test_a_message_answered_again_tells_an_open_stream_to_drop_the_dead_attempts_tokens(migrated_url):
    """The web chat's stream got the dead attempt's tokens, then the new attempt's appended (the same
    sentence twice): a `reset` event comes first now, and the SSE route relays it."""
    from sqlalchemy import update

    from gateway.events import message_topic

    pipeline = EchoPipeline(delay=0)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    stored = await inbox.accept("acme", chat_message("alice", 0))
    async with sessions() as session, session.begin():  # a process died in its first attempt
        await session.execute(update(Message).where(Message.id == stored.message_id).values(attempts=1))
    async with worker.handler._bus.subscribe(message_topic(stored.message_id)) as queue:
        await worker.run_until_idle(timeout=30)
        events = [queue.get_nowait()["type"] for _ in range(queue.qsize())]
    assert events[0] == "reset" and events[-1] == "done" and adapter.sent == [("alice", "echo: alice #0")]
    await engine.dispose()


async def test_a_discord_ask_over_the_rate_limit_always_gets_the_notice(migrated_url):
    """The notice goes out once a window, so a second refused /ask got no reply at all: Discord showed
    "thinking…" for 15 minutes, then "The application did not respond"."""
    import dataclasses

    from gateway.bot_settings import RateLimitSettings
    from gateway.ratelimit import RateLimiter

    limiter = RateLimiter({"acme": RateLimitSettings(per_contact_per_minute=1)})
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(delay=0))
    worker.handler.rate_limiter = limiter
    for n in range(3):  # one at a time: each its own turn, in order
        await inbox.accept("acme", dataclasses.replace(chat_message("alice", n), needs_reply=True))
        await worker.run_until_idle(timeout=30)
    notice = limiter.notice("acme")
    assert [t for _, t in adapter.sent] == ["echo: alice #0", notice, notice]
    await engine.dispose()


async def test_killing_a_worker_keeps_the_lease_of_a_conversation_claimed_as_it_dies(migrated_url):
    """`kill_worker` read the leases held before it stopped the loop: a conversation claimed in between had its
    lease released by the cancelled drain and not put back, so the next worker took it before its lease ran out."""
    begun: list[str] = []
    pipeline = EchoPipeline(delay=0)

    async def hang(turn):
        begun.append(turn.text)
        await asyncio.sleep(3600)

    pipeline.handle = hang
    engine, _, inbox, worker, _ = build_worker(migrated_url, pipeline)
    await inbox.accept("acme", chat_message("alice", 0))
    await worker.start()
    await wait_until(lambda: begun, what="alice's turn")  # alice's turn is in flight as the worker dies
    own, firsts = worker._sessions, []

    @asynccontextmanager
    async def bob_writes_first():
        """The kill's first read; right after it, bob writes, and a loop still running begins his turn."""
        async with own() as session:
            yield session
        await inbox.accept("acme", chat_message("bob", 0))
        await wait_until(lambda: "bob #0" in begun or worker._loop_task.done(), what="bob claimed or no loop")

    def sessions():
        if asyncio.current_task() is killing and not firsts:
            firsts.append(True)
            return bob_writes_first()
        return own()

    worker._sessions = sessions
    killing = asyncio.create_task(kill_worker(worker, engine))
    await killing
    engine, sessions, *_ = build_worker(migrated_url, EchoPipeline())
    async with sessions() as session:
        leases = dict((await session.execute(select(Conversation.chat, Conversation.lease_owner))).all())
    await engine.dispose()
    assert firsts and leases["alice"] == worker.owner
    # Bob's turn, begun before the kill, keeps its lease too; a loop stopped first never claimed him.
    assert leases.get("bob") == (worker.owner if "bob #0" in begun else None)

