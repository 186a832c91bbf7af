"""A file an operator posts in an escalation's Slack thread (a screenshot, a PDF) is not relayed to the
customer: the operator is told so in a message only they see, and the words posted with it still go.
Why: the text went and the file vanished without a word, so the operator believed the customer had it."""

from __future__ import annotations

import pytest

from tests.gateway_channels.conftest import wait_until
from tests.operators.test_slack_operator import _post_event, _thread_reply
from tests.operators.test_slack_reply_failed import _escalated_and_claimed, _in_thread

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCREENSHOT = {"id": "F0SHOT", "name": "refund.png", "mimetype": "image/png",
              "url_private": "https://files.slack.invalid/F0SHOT/refund.png"}


def _to_customer(slack, customer: str) -> list[str]:
    return [c.params.get("text", "") for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == customer]


def _told(slack, thread_ts: str) -> list[dict]:
    return [c.params for c in slack.calls_to("chat.postEphemeral") if c.params.get("thread_ts") == thread_ts]


async def test_an_operators_file_is_not_relayed_and_the_operator_is_told_while_its_words_go(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DFILE")
    before = len(_to_customer(slack, "DFILE"))
    posted = _thread_reply("Here is the refund receipt.", thread_ts, "EvFileWords", subtype="file_share",
                           files=[SCREENSHOT])
    assert (await _post_event(client, posted)).status_code == 200
    told = await wait_until(lambda: _told(slack, thread_ts))
    assert told[0]["user"] == "UOPS"
    assert "not sent to the customer" in told[0]["text"] and "image" in told[0]["text"]
    assert (await wait_until(lambda: _to_customer(slack, "DFILE")[before:])) == ["Here is the refund receipt."]


async def test_an_operators_file_alone_sends_nothing_and_says_why_only_to_them(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DFILE2")
    before = len(_to_customer(slack, "DFILE2"))
    pdf = {**SCREENSHOT, "id": "F0PDF", "name": "invoice.pdf", "mimetype": "application/pdf"}
    posted = _thread_reply("", thread_ts, "EvFileAlone", subtype="file_share", files=[pdf])
    assert (await _post_event(client, posted)).status_code == 200
    told = await wait_until(lambda: _told(slack, thread_ts))
    assert "not sent to the customer" in told[0]["text"] and "document" in told[0]["text"]
    await client.services.escalations.drain()
    assert _to_customer(slack, "DFILE2")[before:] == []
    # Nothing in the thread for everyone, as "Not sent to the customer: text must not be empty" was.
    assert not _in_thread(slack, thread_ts, "Not sent to the customer")
