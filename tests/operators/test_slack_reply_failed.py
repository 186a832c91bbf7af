"""An operator's reply that does not reach the customer is told in the escalation's Slack thread: one the
customer's platform refused, or one written in the thread of an escalation already handed back."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest

from gateway.errors import Conflict
from storage.models import Conversation, Escalation
from tests.fakes.slack_api import sign
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET, auth
from tests.operators.test_slack_operator import _event, _post_event, _thread_reply

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _in_thread(slack, thread_ts: str, words: str) -> list:
    return [c for c in slack.calls_to("chat.postMessage")
            if c.params.get("thread_ts") == thread_ts and words in c.params.get("text", "")]


async def _escalated_and_claimed(client, slack, customer: str) -> tuple[int, str]:
    """A Slack customer (DM `customer`) asks for a person and Slack operator UOPS claims: (id, thread ts)."""
    def headers() -> list:
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL
                and c.params.get("blocks")]

    before = len(headers())
    ask = _event({"type": "message", "channel_type": "im", "channel": customer, "user": "UCUST",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, f"Ev{customer}")
    assert (await _post_event(client, ask)).status_code == 200
    # The header posted for this ask, counted: each module's fake Slack numbers its ts afresh.
    header = (await wait_until(lambda: headers()[before:]))[0]
    # The summary follows once the thread's ts is stored: from then on a thread reply finds its escalation.
    await wait_until(lambda: _in_thread(slack, header.params["_ts"], "*Summary:*"))
    blocks = header.params["blocks"] if isinstance(header.params["blocks"], list) else json.loads(header.params["blocks"])
    escalation_id = int(blocks[1]["elements"][0]["value"])
    form = urlencode({"payload": json.dumps({"type": "block_actions", "user": {"id": "UOPS"}, "actions": [
        {"action_id": "escalation_claim", "value": str(escalation_id)}]})}).encode()
    clicked = await client.post("/webhooks/acme/slack/actions", content=form, headers={
        "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})
    assert clicked.status_code == 200
    await client.services.slack_clicks.drain()  # acknowledged first, claimed after
    return escalation_id, header.params["_ts"]


async def test_a_slack_operators_reply_the_customer_never_got_is_told_in_the_thread(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DGONE")
    slack.fail("chat.postMessage", error="is_archived", channel="DGONE")  # the customer's DM is gone
    reply = _thread_reply("Your refund is on its way.", thread_ts, "EvGoneReply")
    assert (await _post_event(client, reply)).status_code == 200
    told = await wait_until(lambda: _in_thread(slack, thread_ts, "Not delivered to the customer"))
    text = told[0].params["text"]
    assert "<@UOPS>" in text and "Your refund is on its way." in text and "is_archived" in text


async def test_a_console_operators_failed_reply_is_told_in_the_thread_too(client, slack):
    escalation_id, thread_ts = await _escalated_and_claimed(client, slack, "DLEFT")
    taken = await client.post(f"/v1/escalations/{escalation_id}/claim", headers=auth("sam"),
                              json={"take_over": True})
    assert taken.status_code == 200
    slack.fail("chat.postMessage", error="cannot_dm_bot", channel="DLEFT")
    sent = await client.post(f"/v1/escalations/{escalation_id}/reply", headers=auth("sam"),
                             json={"text": "Still with us?"})
    assert sent.status_code == 201 and sent.json()["status"] == "failed"
    told = await wait_until(lambda: _in_thread(slack, thread_ts, "Not delivered to the customer"))
    # sam is Slack member UOPS too: mentioned, so Slack tells him where he is looking.
    assert "<@UOPS>'s reply" in told[0].params["text"]


async def test_a_reply_in_a_handed_back_thread_points_to_the_customers_new_escalation(client, slack):
    """The reply was refused ("already resolved") and nothing said the customer waited in a new thread."""
    first, old_thread = await _escalated_and_claimed(client, slack, "DAGAIN")
    await client.services.escalations.resolve(first, operator="sam", bots=None)
    headers = len([c for c in slack.calls_to("chat.postMessage") if c.params.get("blocks")])
    again = _event({"type": "message", "channel_type": "im", "channel": "DAGAIN", "user": "UCUST",
                    "text": "I need to talk to a human again", "ts": f"{time.time():.6f}"}, "EvAgain")
    assert (await _post_event(client, again)).status_code == 200
    header = await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage") if c.params.get("blocks")][headers:])
    blocks = header[0].params["blocks"]
    second = int((blocks if isinstance(blocks, list) else json.loads(blocks))[1]["elements"][0]["value"])
    assert second != first

    late = _thread_reply("One more thing about your refund", old_thread, "EvLate")
    assert (await _post_event(client, late)).status_code == 200
    told = await wait_until(lambda: _in_thread(slack, old_thread, "Not sent to the customer"))
    text = told[0].params["text"]
    assert f"escalation {first} is already resolved by sam, and the customer asked for a person again" in text
    assert text.endswith(f"escalation {second}, open. Answer in the thread of escalation #{second}.")
    assert text.count("asked for a person again") == 1  # said once, not by the refusal and again by Slack


class _AskedAgainMeanwhile:
    """The escalation service, but the customer asks for a person again right after a reply is refused."""

    def __init__(self, real, sessions) -> None:
        self._real, self._sessions, self.opened = real, sessions, None

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    async def reply(self, escalation_id: int, **kwargs):
        try:
            return await self._real.reply(escalation_id, **kwargs)
        except Conflict:
            async with self._sessions() as session, session.begin():
                conversation = await session.get(Conversation, (await session.get(Escalation, escalation_id)).conversation_id)
                self.opened = (await self._real.open_in(session, conversation=conversation, reason="again")).id
            raise


async def test_a_refused_reply_is_worded_from_the_state_it_was_refused_on(client, slack, monkeypatch):
    """Read again after the refusal, a customer asking for a person in between made Slack say "the bot
    answers the customer again. Answer in the thread of escalation #N": two ways, one of them wrong."""
    first, thread = await _escalated_and_claimed(client, slack, "DRACE")
    await client.services.escalations.resolve(first, operator="sam", bots=None)
    meanwhile = _AskedAgainMeanwhile(client.services.escalations, client.services.sessions)
    monkeypatch.setattr(client.services.slack_operator, "_escalations", meanwhile)
    late = _thread_reply("One more thing", thread, "EvRaceLate")
    assert (await _post_event(client, late)).status_code == 200
    told = await wait_until(lambda: _in_thread(slack, thread, "Not sent to the customer"))
    assert meanwhile.opened is not None
    text = told[0].params["text"]
    assert text.endswith("the bot answers the customer again.") and "Answer in the thread" not in text
