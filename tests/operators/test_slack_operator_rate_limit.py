"""Slack's rate limit on the operator channel's posts (about one a second per channel): a 429 with a short
Retry-After is waited out once, so what the customer wrote still reaches the thread; a long one is not
waited for, since the relay runs in the worker's slot."""

from __future__ import annotations

import time

import pytest
from structlog.testing import capture_logs

from tests.channels.slack_helpers import Sleeps
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL
from tests.operators.test_slack_operator import _event, _post_event, _until_handled
from tests.operators.test_slack_operator_access import asked_for_a_person
from tests.operators.test_slack_reply_failed import _in_thread

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _customer_writes(client, customer: str, text: str, event_id: str) -> None:
    more = _event({"type": "message", "channel_type": "im", "channel": customer, "user": "UCUST",
                   "text": text, "ts": f"{time.time():.6f}"}, event_id)
    assert (await _post_event(client, more)).status_code == 200
    await _until_handled(client, text)


async def test_a_customer_message_relayed_into_a_rate_limited_thread_waits_out_a_short_retry_after(
        client, slack, monkeypatch):
    _, thread_ts = await asked_for_a_person(client, slack, "DBUSY")
    sleeps = Sleeps()
    monkeypatch.setattr(client.services.slack_operator, "_sleep", sleeps)
    # Before: the 429 was logged as slack_operator.post_failed and the message never reached the thread.
    slack.fail("chat.postMessage", status=429, retry_after=1, channel=OPS_CHANNEL)
    await _customer_writes(client, "DBUSY", "Order #31 is still missing", "EvBusy1")
    # The refused post is in the thread's calls too: wait for the one Slack took (the fake gives it a ts).
    relayed = await wait_until(lambda: [c for c in _in_thread(slack, thread_ts, "Order #31") if "_ts" in c.params])
    assert sleeps == [1.0] and len(relayed) == 1

    # A long wait is not held: the post fails at once and says so.
    slack.fail("chat.postMessage", status=429, retry_after=30, channel=OPS_CHANNEL)
    with capture_logs() as logs:
        await _customer_writes(client, "DBUSY", "Hello? Order #32", "EvBusy2")
        failed = await wait_until(lambda: [e for e in logs if e["event"] == "slack_operator.post_failed"])
    assert sleeps == [1.0] and failed[0]["retry_after"] == 30.0
    await client.services.escalations.drain()
