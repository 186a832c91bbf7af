"""Only configured operators act in the Slack operator channel: really signed clicks and thread replies from a
member mapped to an operator of the bot (`slack_user_ids`), and from members who are not. Before, anyone
who could post in the channel claimed, replied to the customer and resolved."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlencode

import pytest
from structlog.testing import capture_logs

from tests.fakes.slack_api import sign
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET, SLACK_MEMBERS
from tests.operators.test_slack_operator import _event, _post_event, _thread_reply

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _click(client, member: str, action: str, escalation_id: int, header_ts: str):
    form = urlencode({"payload": json.dumps({
        "type": "block_actions", "user": {"id": member, "username": "someone"},
        "container": {"type": "message", "message_ts": header_ts, "channel_id": OPS_CHANNEL},
        "actions": [{"action_id": action, "value": str(escalation_id)}]})}).encode()
    return await client.post("/webhooks/acme/slack/actions", content=form, headers={
        "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})


def _told(slack, member: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postEphemeral") if c.params.get("user") == member]


async def asked_for_a_person(client, slack, customer: str) -> tuple[int, str]:
    """A Slack customer (DM `customer`) asks for a person, the module's first: (escalation id, thread ts), once
    the thread has its summary."""
    ask = _event({"type": "message", "channel_type": "im", "channel": customer, "user": "UCUST",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, f"Ev{customer}Ask")
    assert (await _post_event(client, ask)).status_code == 200
    header = await wait_until(lambda: next((c for c in slack.calls_to("chat.postMessage")
                                            if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")), None))
    thread_ts = header.params["_ts"]
    blocks = header.params["blocks"] if isinstance(header.params["blocks"], list) else json.loads(header.params["blocks"])
    await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts])
    return int(blocks[1]["elements"][0]["value"]), thread_ts


async def test_only_a_member_mapped_to_an_operator_of_the_bot_claims_replies_and_resolves(client, slack):
    escalation_id, thread_ts = await asked_for_a_person(client, slack, "DACCESS")
    escalations = client.services.escalations

    # A guest of the channel, and an operator who serves only another bot: refused, told privately, logged.
    for member in ("UGUEST", SLACK_MEMBERS["lee"]):
        for action in ("escalation_claim", "escalation_resolve"):
            with capture_logs() as logs:
                assert (await _click(client, member, action, escalation_id, thread_ts)).status_code == 200
            assert (await escalations.get(escalation_id, bots=None)).state == "open"
            assert [e["user"] for e in logs if e["event"] == "slack_operator.not_an_operator"] == [member]
        told = _told(slack, member)
        assert len(told) == 2 and "You are not an operator for this bot (acme)" in told[0] and member in told[0]
        assert {c.params["channel"] for c in slack.calls_to("chat.postEphemeral")} == {OPS_CHANNEL}
        assert not [c for c in slack.calls_to("chat.postEphemeral") if c.params.get("thread_ts")]  # beside the header
    assert slack.count("chat.update") == 0  # the header was not touched

    assert (await _click(client, SLACK_MEMBERS["sam"], "escalation_claim", escalation_id, thread_ts)).status_code == 200
    escalation = await escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "slack:UOPS"

    # A guest's thread reply does not reach the customer; the operator's does.
    to_customer = len([c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DACCESS"])
    await _post_event(client, _thread_reply("Pay here: evil.example", thread_ts, "EvAccessGuest", user="UGUEST"))
    await wait_until(lambda: len(_told(slack, "UGUEST")) == 3)
    assert _told(slack, "UGUEST")[-1].startswith("You are not an operator")
    assert slack.calls_to("chat.postEphemeral")[-1].params["thread_ts"] == thread_ts  # in the thread they wrote in
    await _post_event(client, _thread_reply("Refund issued.", thread_ts, "EvAccessOps"))
    sent = await wait_until(lambda: [c.params["text"] for c in slack.calls_to("chat.postMessage")
                                     if c.params.get("channel") == "DACCESS"][to_customer:])
    await asyncio.sleep(0.2)
    assert sent == ["Refund issued."]

    assert (await _click(client, "UGUEST", "escalation_resolve", escalation_id, thread_ts)).status_code == 200
    assert (await escalations.get(escalation_id, bots=None)).state == "claimed"
    assert (await _click(client, SLACK_MEMBERS["sam"], "escalation_resolve", escalation_id, thread_ts)).status_code == 200
    assert (await escalations.get(escalation_id, bots=None)).state == "resolved"
    await escalations.drain()
