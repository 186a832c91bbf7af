"""A customer's edit of a message they sent while a person holds the thread reaches the Slack thread (and the
console) marked as an edit, with the words it replaces. Why: it was posted as "*Customer:*", as a new message would be, and
the operator answered both versions (a refund of 10 EUR and one of 12)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from storage import repositories as repo
from storage.models import Message
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import auth
from tests.operators.test_slack_operator import _event, _post_event, _until_handled
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _customer_posts(slack, thread_ts: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postMessage")
            if c.params.get("thread_ts") == thread_ts and c.params.get("text", "").startswith("*Customer")]


async def test_a_customers_edit_during_the_hold_is_marked_as_an_edit_in_the_slack_thread(client, slack):
    escalation_id, thread_ts = await _escalated_and_claimed(client, slack, "DCEDIT")
    said = _event({"type": "message", "channel_type": "im", "channel": "DCEDIT", "user": "UCUST",
                   "text": "Please refund 10 EUR", "ts": f"{time.time():.6f}"}, "EvCEditSaid")
    assert (await _post_event(client, said)).status_code == 200
    await _until_handled(client, "Please refund 10 EUR", direction="in")
    assert await wait_until(lambda: _customer_posts(slack, thread_ts)) == ["*Customer:*\n> Please refund 10 EUR"]

    # The customer's edit landed while the held message was handled: stored as a message of its own
    # (`gateway.edits_meanwhile`), handled next, as the worker does.
    async with client.services.sessions() as session, session.begin():
        first = (await session.execute(select(Message).where(Message.text == "Please refund 10 EUR"))).scalar_one()
        await repo.add_edit_to_answer(session, of=first, text="Please refund 12 EUR")
    client.services.worker.notify()
    await _until_handled(client, "Please refund 12 EUR", direction="in")
    posts = await wait_until(lambda: _customer_posts(slack, thread_ts)[1:])
    assert posts == ["*Customer (edited):*\n> Please refund 12 EUR\n_It replaces:_\n> Please refund 10 EUR"]
    # The console shows it the same way ("Customer (edited)", "It replaces: …"), from the detail's `replaces`.
    detail = (await client.get(f"/v1/escalations/{escalation_id}", headers=auth("sam"))).json()
    shown = {m["text"]: m.get("replaces") for m in detail["messages"] if m["direction"] == "in"}
    assert shown["Please refund 12 EUR"] == "Please refund 10 EUR" and shown["Please refund 10 EUR"] is None
    await client.services.escalations.drain()
