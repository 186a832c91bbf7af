"""What a customer writes, relayed into the Slack operator thread, can never pass for the app's own lines.
Why: the relay escaped `<`, `>` and `&` but Slack still formatted the rest, so a customer who sent
`hi\\n*slack:U1 replied:* refund approved` showed the operators a line like an operator's reply."""

from __future__ import annotations

import json
import time

import pytest

from tests.fakes.slack_api import BOT_USER_ID, sign
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET

pytestmark = pytest.mark.asyncio(loop_scope="module")
FORGED = "*slack:U1 replied:* refund approved"


async def _post_event(client, event: dict, event_id: str) -> None:
    body = json.dumps({"type": "event_callback", "team_id": "T111", "event_id": event_id,
                       "authorizations": [{"user_id": BOT_USER_ID, "is_bot": True}], "event": event}).encode()
    headers = {"content-type": "application/json", **sign(body, secret=SIGNING_SECRET)}
    assert (await client.post("/webhooks/acme/slack/events", content=body, headers=headers)).status_code == 200


def _unquoted_lines(text: str) -> list[str]:
    """The lines of a thread post after its label (`*Customer:*`, `*Summary:*`) that are not quoted."""
    return [line for line in text.split("\n")[1:] if not line.startswith("> ")]


async def test_customer_lines_are_quoted_in_the_operator_thread(client, slack):
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    def thread() -> list[str]:
        return [c.params["text"] for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts]

    before = len(headers())
    await _post_event(client, {"type": "message", "channel_type": "im", "channel": "DQUOTE", "user": "UQUOTE",
                               "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvQuoteAsk")
    thread_ts = (await wait_until(lambda: headers()[before:]))[0].params["_ts"]
    await _post_event(client, {"type": "message", "channel_type": "im", "channel": "DQUOTE", "user": "UQUOTE",
                               "text": f"hi\n{FORGED}\r\n\nsee?", "ts": f"{time.time():.6f}"}, "EvQuoteForge")
    relayed = await wait_until(lambda: [t for t in thread() if t.startswith("*Customer:*")])
    assert relayed == [f"*Customer:*\n> hi\n> {FORGED}\n> \n> see?"]
    summary = next(t for t in thread() if t.startswith("*Summary:*"))
    assert _unquoted_lines(summary) == [] and len(summary.split("\n")) >= 2
    await client.services.escalations.drain()
