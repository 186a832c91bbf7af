"""An operator's thread reply also sent to the channel (Slack's "Also send to #channel": `subtype:
thread_broadcast`) is a reply in the thread like any other, relayed to the customer."""

from __future__ import annotations

import time

import pytest

from tests.fakes.slack_api import BOT_ID, BOT_USER_ID
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL
from tests.operators.test_slack_operator import _event, _post_event
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_an_operators_first_reply_also_sent_to_the_channel_reaches_the_customer(client, slack):
    """Slack's `thread_broadcast` carries the thread's `root`, not `parent_user_id`, so the reply read as one in
    a thread the bot has no conversation in: the operator's first reply so sent was dropped, unanswered and
    unrelayed, while the operator saw it in the thread and in the channel."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DBROADCAST")
    header = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": "Escalation", "ts": thread_ts,
              "thread_ts": thread_ts, "reply_count": 2}
    broadcast = _event({"type": "message", "subtype": "thread_broadcast", "channel": OPS_CHANNEL,
                        "channel_type": "channel", "user": "UOPS", "text": "Your parcel left the depot today.",
                        "ts": f"{time.time():.6f}", "thread_ts": thread_ts, "root": header}, "EvBroadcast")
    assert (await _post_event(client, broadcast)).status_code == 200
    await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DBROADCAST"
                              and c.params.get("text") == "Your parcel left the depot today."], what="the reply relayed")
