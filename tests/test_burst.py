"""When a burst's wait ends (gateway/burst.py), on a real SQLite store through the real inbox."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from gateway.burst import burst_followers
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender
from storage.engine import create_engine, session_factory
from storage.models import Message
from tests.worker_rig import EchoPipeline, build_worker

pytestmark = pytest.mark.asyncio


async def _waits_for(url: str, *texts: str) -> list[float]:
    """Store `texts` from one Telegram customer, then ask the first's followers; the sleeps asked for."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    inbox = Inbox(sessions)
    for n, text in enumerate(texts):
        await inbox.accept("acme", InboundMessage(channel="telegram", external_id=f"tg-{n}", sender=Sender("42"),
                                                  conversation=ConversationRef("telegram", chat="42"), text=text))
    async with sessions() as session:
        first = (await session.execute(select(Message).order_by(Message.id).limit(1))).scalar_one()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    burst = await burst_followers(sessions, first, window_s=1.5, max_wait_s=3.0, sleep=sleep)
    await engine.dispose()
    assert burst.waited == bool(slept)  # only a wait has the message read again (MessageHandler.handle)
    return slept


async def test_a_whole_question_is_answered_without_waiting(migrated_url):
    assert await _waits_for(migrated_url, "How do I reset my password?") == []


async def test_pieces_that_end_a_question_are_answered_without_waiting(migrated_url):
    assert await _waits_for(migrated_url, "my order", "is late", "?") == []


@pytest.mark.parametrize("texts", [("hi",), ("my order",), ("How much does", "the Plus plan"),
                                   ("my order is late and...",), ("my order is late and…",)])
async def test_a_piece_that_ends_no_question_waits_for_more(migrated_url, texts):
    assert await _waits_for(migrated_url, *texts)  # the customer may still be typing


async def test_burst_pieces_stored_out_of_order_are_joined_in_the_order_sent(migrated_url):
    """Two webhooks delivered side by side were stored in either order, and the pieces were joined in
    the store's: "the Plus plan cost?" / "How much does". Telegram's `date` is whole seconds, so its
    message_id (`sequence`) decides."""
    pipeline = EchoPipeline(delay=0)
    engine, sessions, inbox, worker, _ = build_worker(migrated_url, pipeline, channels=("telegram",))
    sent = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
    for sequence, text in ((12, "the Plus plan cost?"), (11, "How much does")):
        await inbox.accept("acme", InboundMessage(
            channel="telegram", external_id=f"tg-{sequence}", sender=Sender("42"), sent_at=sent, sequence=sequence,
            conversation=ConversationRef("telegram", chat="42"), text=text))
    await worker.run_until_idle(timeout=30)
    await engine.dispose()
    assert [text for _, text in pipeline.seen] == ["How much does\nthe Plus plan cost?"]
