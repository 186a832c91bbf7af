"""`gateway_escalation_time_to_claim_seconds` measures the customer's current wait for a person: from the
escalation's opening, or from its last release (`waiting_since`), to the claim (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.models import ConversationRef, utcnow
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Escalation


@pytest.fixture
async def world(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    metrics = Metrics()
    escalations = Escalations(sessions, settings=Settings(bots=[{"name": "acme"}]), bus=EventBus(), metrics=metrics)
    yield sessions, escalations, metrics
    await escalations.drain()
    await engine.dispose()


def _observed(metrics: Metrics) -> tuple[float, float]:
    """(count, sum) of the time-to-claim histogram for bot acme."""
    name = "gateway_escalation_time_to_claim_seconds"
    return (metrics.registry.get_sample_value(f"{name}_count", {"bot": "acme"}) or 0,
            metrics.registry.get_sample_value(f"{name}_sum", {"bot": "acme"}) or 0)


async def test_time_to_claim_after_a_release_counts_from_the_release(world):
    """Opened two hours ago, claimed, released a moment ago and claimed again: the second claim was observed
    as two hours (from the opening), as if the customer had waited that long since the release."""
    sessions, escalations, metrics = world
    async with sessions() as session, session.begin():
        conversation = await repo.get_or_create_conversation(
            session, bot="acme", ref=ConversationRef(channel="web", chat="wait-1"), contact_id=None)
        eid = (await escalations.open_in(session, conversation=conversation, reason="customer asked")).id
        await session.execute(update(Escalation).where(Escalation.id == eid)
                              .values(created_at=utcnow() - timedelta(hours=2)))
    await escalations.claim(eid, operator="sam", bots=None)
    count, first = _observed(metrics)
    assert count == 1 and 7100 < first < 7300  # the first wait: from the opening
    await escalations.release(eid, operator="sam", bots=None)
    await escalations.claim(eid, operator="kim", bots=None)
    count, total = _observed(metrics)
    assert count == 2 and total - first < 60  # the second wait: from the release
