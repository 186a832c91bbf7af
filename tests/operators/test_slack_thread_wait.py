"""The wait for an escalation's Slack thread hands over to the late-header repair exactly at the deadline."""

from __future__ import annotations

import types
from datetime import datetime, timedelta, timezone

import pytest

from gateway.operators import slack_operator
from gateway.operators.slack_operator import THREAD_POLL_SECONDS, THREAD_WAIT_SECONDS, SlackOperatorChannel
from storage.models import Escalation


class _Clock:
    """A fake `utcnow` that only moves when the code under test sleeps."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.looks: list[datetime] = []  # when the escalation was read again

    def utcnow(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class _Sessions:
    """Stands in for the session factory: every read returns the same escalation, noting the time."""

    def __init__(self, escalation: Escalation, clock: _Clock) -> None:
        self.escalation, self.clock = escalation, clock

    def __call__(self):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def get(self, _model, _id):
        self.clock.looks.append(self.clock.now)
        return self.escalation


@pytest.mark.asyncio
async def test_the_last_look_for_the_thread_is_at_the_deadline_not_a_poll_after_it(monkeypatch):
    # 0.25 s before the deadline, with 0.1 s polls: it looks 0.15 s and 0.05 s before the deadline and
    # then at it, never 0.05 s after, when the repair (`post_missing_headers`) already owns the header
    # and relays the message itself.
    created = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    deadline = created + timedelta(seconds=THREAD_WAIT_SECONDS)
    clock = _Clock(deadline - timedelta(seconds=2.5 * THREAD_POLL_SECONDS))
    monkeypatch.setattr(slack_operator, "utcnow", clock.utcnow)
    monkeypatch.setattr(slack_operator, "asyncio", types.SimpleNamespace(sleep=clock.sleep))
    escalation = Escalation(id=7, bot="acme", created_at=created, slack_ts=None)
    channel = SlackOperatorChannel(_Sessions(escalation, clock), settings=None, escalations=None, adapters={})

    assert (await channel._wait_for_thread(escalation)).slack_ts is None
    assert clock.looks and max(clock.looks) == deadline
