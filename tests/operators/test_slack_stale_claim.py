"""The stale-claim ping in the escalation's Slack thread reaches the holder."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.models import utcnow
from tests.gateway_channels.conftest import wait_until
from tests.operators.test_slack_reply_failed import _escalated_and_claimed, _in_thread

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_stale_claim_in_the_slack_thread_mentions_its_holder(client, slack):
    """"<!here> The customer has waited 16 min for sam's reply": `@here` notifies only the members active
    right now, so the holder who stepped away (the one the ping is about) was the one it never reached.
    The holder is mentioned, as a reply the customer never got mentions its operator."""
    escalation_id, thread_ts = await _escalated_and_claimed(client, slack, "DSTALE")
    reminded = await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=901))
    assert escalation_id in reminded
    told = await wait_until(lambda: _in_thread(slack, thread_ts, "The customer has waited"))
    assert told[0].params["text"].startswith("<!here> The customer has waited 15 min for <@UOPS>'s reply")
