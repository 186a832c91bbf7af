"""An operator's edit of a relayed reply, passed on while `gateway forget` erased the customer: the stored reply
is gone when the change would be stored. Why: `stored` was None, and `stored.text = …` raised AttributeError
(an error logged for the thread message, and the edit's handling failed)."""

from __future__ import annotations

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from gateway.retention import forget_contact
from storage.models import Message
from tests.gateway_channels.conftest import wait_until
from tests.operators.test_slack_operator import _post_event, _thread_reply
from tests.operators.test_slack_operator_edits import _relayed, _revision
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_an_operators_edit_of_a_reply_erased_meanwhile_is_logged_not_a_crash(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DFORGOT")
    ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply("Your refund is 10 EUR.", thread_ts, "EvForgotReply", ts=ts))).status_code == 200
    reply = await _relayed(client, "Your refund is 10 EUR.")

    slack.delays["chat.update:DFORGOT"] = 1.5  # the customer's copy is being edited while they are erased
    edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvForgotEdit",
                       new_text="Your refund is 12 EUR.")
    with capture_logs() as logs:
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: slack.delayed)
        report = await forget_contact(client.services.sessions, channel="slack", user="UCUST")
        assert report.escalations == 1
        await wait_until(lambda: [e for e in logs if e["event"].startswith("slack_operator.revision")
                                  or e.get("log_level") == "error"])
        await asyncio.sleep(0.5)  # anything else it would log
    slack.delays.pop("chat.update:DFORGOT")
    assert not [e for e in logs if e.get("log_level") in ("error", "critical")], logs
    [line] = [e for e in logs if e["event"].startswith("slack_operator.revision")]
    assert line["event"] == "slack_operator.revision_not_stored" and line["message_id"] == reply.id
    assert "erased" in line["reason"] and line["change"] == "edit"
    async with client.services.sessions() as session:
        assert await session.get(Message, reply.id) is None  # nothing stored anew
