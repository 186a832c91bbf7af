"""What operators are told of an escalation nobody claimed: how long the customer has waited, and whether the
customer was told anything. Why: the Slack ping always said "the customer has been told we're busy", also for
a bot whose `unclaimed_message` is "" (the customer was told nothing), and neither it nor the live event said
how long they had waited; the console showed no notice of it at all."""

from __future__ import annotations

import asyncio
from datetime import timedelta, timezone

import pytest
from sqlalchemy import select

from gateway.events import ESCALATIONS_TOPIC
from storage.models import Escalation
from tests.conftest import app_client
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET

pytestmark = pytest.mark.asyncio(loop_scope="function")


@pytest.mark.parametrize(("unclaimed_message", "told", "words"), [
    ("", False, "Still unclaimed after 20 min: the customer was not told (unclaimed_message is empty)."),
    ("We're all busy, sorry.", True, "Still unclaimed after 20 min: the customer has been told we're busy."),
])
async def test_the_unclaimed_ping_says_how_long_and_whether_the_customer_was_told(tmp_path, unclaimed_message, told,
                                                                                   words):
    slack = await FakeSlack.start()
    try:
        bots = [{"name": "acme", "escalation": {"claim_timeout_seconds": 600, "unclaimed_message": unclaimed_message},
                 "channels": {"web": {}, "slack": {"bot_token": "${OPS_SLACK_BOT}", "signing_secret": "${OPS_SLACK_SECRET}",
                                                    "api_base": slack.api_base, "operator_channel": OPS_CHANNEL}}}]
        env = {"OPS_SLACK_BOT": BOT_TOKEN, "OPS_SLACK_SECRET": SIGNING_SECRET}
        async with app_client(tmp_path, bots=bots, env=env) as client:
            await client.services.reminders.stop()  # this test's clock, not the loop's
            asked = await client.post("/v1/bots/acme/chat", json={"session_id": "s", "text": "I want to talk to a human"})
            conversation_id = asked.json()["conversation_id"]

            async def posted():
                async with client.services.sessions() as session:
                    return (await session.execute(select(Escalation).where(
                        Escalation.conversation_id == conversation_id, Escalation.slack_ts.is_not(None)))).scalar_one_or_none()

            escalation = await wait_until(posted, what="the header")
            opened = escalation.created_at.replace(tzinfo=escalation.created_at.tzinfo or timezone.utc)
            async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
                await client.services.reminders.run_once(now=opened + timedelta(minutes=20, seconds=30))
                event = await asyncio.wait_for(queue.get(), 5)
            assert event["type"] == "reminder" and event["waiting_minutes"] == 20 and event["customer_told"] is told

            def ping():
                return [c.params["text"] for c in slack.calls_to("chat.postMessage")
                        if c.params.get("thread_ts") == escalation.slack_ts and "Still unclaimed" in c.params.get("text", "")]

            [text] = await wait_until(ping, what="the ping")
            assert text == f"<!here> {words} Can someone take it?"
    finally:
        await slack.stop()
