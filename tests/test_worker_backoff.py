"""A worker that cannot store a turn, or reach the database at all: it backs off instead of paying the
model again at once, logs an outage once a minute, and stores the text a turn produced in a form both
stores accept."""

from __future__ import annotations

import asyncio

import structlog
from sqlalchemy.exc import OperationalError

from gateway.pipeline import PipelineResult
from tests.worker_rig import EchoPipeline, answer_one, build_worker, chat_message


async def test_a_reply_with_nul_or_half_an_emoji_is_stored_once(migrated_url):
    """PostgreSQL refuses NUL, and both stores a lone surrogate (a model streaming an emoji's two
    halves as two JSON escapes): the turn could never be stored, and was attempted again at once."""
    pipeline = EchoPipeline(delay=0)

    async def odd_text(turn):
        pipeline.seen.append((turn.conversation_id, turn.text))
        return PipelineResult(reply="Enjoy \ud83d" + "\ude00 the\x00 trip", tool_calls=[
            {"round": 1, "id": "c1", "name": "lookup", "arguments": {"q": "a\x00b"}, "result": {"t": "\udc80"}}])

    pipeline.handle = odd_text
    reply, adapter = await answer_one(migrated_url, pipeline)
    assert len(pipeline.seen) == 1
    assert reply.text == "Enjoy 😀 the trip" and adapter.sent == [("alice", "Enjoy 😀 the trip")]
    assert reply.tool_calls[0]["arguments"] == {"q": "ab"} and reply.tool_calls[0]["result"] == {"t": "\ufffd"}


async def test_a_turn_that_cannot_be_stored_is_tried_again_later_not_at_once(migrated_url):
    """Whatever makes storing fail (a schema behind the code, say), each failed attempt parks the
    conversation, longer each time: it was taken again at once, hundreds of paid model calls a minute."""
    pipeline = EchoPipeline(delay=0)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)

    async def refused(*args, **kwargs):
        raise OperationalError("INSERT INTO messages", {}, Exception("column does not exist"))

    worker.handler._finish = refused
    await inbox.accept("acme", chat_message("alice", 0))
    with structlog.testing.capture_logs() as logs:
        await worker.start()
        await asyncio.sleep(2.5)
        await worker.stop()
    assert 2 <= len(pipeline.seen) <= 3  # at 0 s, after 1 s, after 2 more; before: dozens
    backing_off = [e for e in logs if e["event"] == "worker.drain_backing_off"]
    assert [e["seconds"] for e in backing_off][:2] == [1.0, 2.0]
    await engine.dispose()


async def test_a_database_outage_is_one_claim_failed_line_then_one_a_minute_and_its_end(migrated_url):
    """A 40 s outage logged 41 ERRORs with a full traceback each, one per poll."""
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(delay=0))
    claim = worker._claim_round
    down = True

    async def flaky():
        if down:
            raise OperationalError("SELECT", {}, Exception("connection refused"))
        return await claim()

    worker._claim_round = flaky
    with structlog.testing.capture_logs() as logs:
        await worker.start()
        await asyncio.sleep(0.6)  # about 12 polls
        down = False
        await asyncio.sleep(0.3)
        await worker.stop()
    events = [e["event"] for e in logs if e["event"].startswith("worker.claim")]
    assert events == ["worker.claim_failed", "worker.claim_recovered"]
    await engine.dispose()


async def test_the_failed_drain_counts_a_worker_keeps_are_bounded(migrated_url, monkeypatch):
    """A conversation another replica drained after a failure here was never forgotten: one entry per
    such conversation for the life of the process."""
    import gateway.worker as worker_module

    monkeypatch.setattr(worker_module, "_MAX_TRACKED_FAILURES", 3)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(delay=0))
    for conversation_id in range(1, 6):
        await worker._back_off(conversation_id)
    await worker._back_off(5)
    assert worker._failed_drains == {3: 1, 4: 1, 5: 2}
    await engine.dispose()
