"""A Slack operator thread opens with its summary: a customer message relayed while the summary is written
waits for it (`SlackOperatorChannel._opening`)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL
from tests.operators.test_slack_operator import _event, _post_event, _until_handled

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_summary_opens_the_thread_even_when_the_customer_writes_while_it_is_written(client, slack, monkeypatch):
    # The header's ts is stored as soon as it is posted; a model may then take seconds over the summary.
    # A customer message relayed meanwhile used to land first, and the thread no longer opened with it.
    import gateway.operators.slack_operator as slack_operator

    written, slow = asyncio.Event(), slack_operator.summarize

    async def slow_summary(*args, **kwargs):
        await written.wait()
        return await slow(*args, **kwargs)

    monkeypatch.setattr(slack_operator, "summarize", slow_summary)
    # Where a relay waits for its thread to be opened: reached, with the thread still opening, it is held there.
    channel, at_gate = client.services.slack_operator, []
    thread_opened = channel._thread_opened

    async def relay_at_gate(escalation_id: int) -> None:
        at_gate.append(escalation_id)
        await thread_opened(escalation_id)

    monkeypatch.setattr(channel, "_thread_opened", relay_at_gate)

    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    def thread() -> list[str]:
        return [c.params["text"] for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts]

    before = len(headers())
    try:
        ask = _event({"type": "message", "channel_type": "im", "channel": "DSUM", "user": "USUM",
                      "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvSumAsk")
        assert (await _post_event(client, ask)).status_code == 200
        header = (await wait_until(lambda: headers()[before:]))[0]
        thread_ts = header.params["_ts"]
        blocks = header.params["blocks"]
        escalation_id = int((blocks if isinstance(blocks, list) else json.loads(blocks))[1]["elements"][0]["value"])
        more = _event({"type": "message", "channel_type": "im", "channel": "DSUM", "user": "USUM",
                       "text": "Order #99 is late", "ts": f"{time.time():.6f}"}, "EvSumMore")
        await _post_event(client, more)
        await _until_handled(client, "Order #99 is late")
        await wait_until(lambda: escalation_id in at_gate, what="the relay at its thread")  # it saw the stored thread
        assert channel._opening[escalation_id].locked()  # and waits: the thread is still being opened
        assert thread() == []  # held: the summary is not written yet
    finally:
        written.set()  # a failure above must not leave the summary waiting for ever
    texts = await wait_until(lambda: thread() if len(thread()) >= 2 else None)
    assert texts[0].startswith("*Summary:*\n> Asked first: I need to talk to a human")
    assert texts[1] == "*Customer:*\n> Order #99 is late"
    await client.services.escalations.drain()
