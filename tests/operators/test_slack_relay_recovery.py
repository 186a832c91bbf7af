"""A held customer message the escalation's Slack thread never got is relayed by the periodic check, once: after
a crash between its store and its relay, and after a post whose answer was lost. Why: the worker stores the
message done and then relays it; a process that died in between left the console with it and the Slack
thread without it, for good, and a post Slack refused (or answered with an error) was dropped the same way."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from gateway.models import utcnow
from gateway.operators.slack_backlog import POSTING_STALE_SECONDS, RELAY_STALE_SECONDS
from storage.models import Message
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL
from tests.operators.test_slack_operator import _event, _post_event, _until_handled
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _relays(slack, thread_ts: str, words: str) -> list[dict]:
    """The posts of the customer's message `words` in the thread (those Slack took)."""
    return [c.params for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts
            and "_ts" in c.params and words in c.params.get("text", "")]


async def _held(client, slack, customer: str, text: str, *, relay_expected: bool = True) -> Message:
    said = _event({"type": "message", "channel_type": "im", "channel": customer, "user": "UCUST", "text": text,
                   "ts": f"{time.time():.6f}"}, f"Ev{customer}Held")
    assert (await _post_event(client, said)).status_code == 200
    await _until_handled(client, text, direction="in")

    async def relayed() -> Message | None:  # the worker relays it after storing it done
        async with client.services.sessions() as session:
            message = (await session.execute(select(Message).where(Message.text == text))).scalar_one()
        if not relay_expected:
            return message
        # Taken for its post (`relay: posting`), and the post has reached Slack.
        tried = any(text in c.params.get("text", "") for c in slack.calls_to("chat.postMessage"))
        return message if tried and message.meta.get("relay") != "owed" else None

    return await wait_until(relayed)


async def _check(client) -> None:
    """The periodic check, once the worker's relay (its post included) would be long over."""
    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=POSTING_STALE_SECONDS + 5))


async def test_a_held_message_stored_before_a_crash_is_relayed_once_by_the_periodic_check(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DCRASH")
    escalations, relay = client.services.escalations, client.services.slack_operator.on_event
    escalations.listeners.remove(relay)  # the process dies after the store, before the relay
    try:
        message = await _held(client, slack, "DCRASH", "Order 77 never arrived", relay_expected=False)
    finally:
        escalations.listeners.append(relay)
    assert message.meta["relay"] == "owed" and not _relays(slack, thread_ts, "Order 77")
    await _check(client)
    [posted] = _relays(slack, thread_ts, "Order 77")
    assert posted["text"] == "*Customer (earlier):*\n> Order 77 never arrived"
    await _check(client)
    assert len(_relays(slack, thread_ts, "Order 77")) == 1
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "done"


async def test_a_relay_whose_answer_was_lost_is_not_posted_again(client, slack):
    """Slack took the post and answered with an error (the process could as well have died before marking it):
    the check finds it in the thread by its metadata."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DLANDED")
    slack.fail("chat.postMessage", status=500, channel=OPS_CHANNEL, landed=True)
    message = await _held(client, slack, "DLANDED", "Is my parcel lost?")
    assert message.meta["relay"] == "posting" and len(_relays(slack, thread_ts, "parcel")) == 1
    await _check(client)
    await _check(client)
    assert len(_relays(slack, thread_ts, "parcel")) == 1
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "done"


async def test_a_relay_slack_refused_is_posted_once_by_the_periodic_check(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DREFUSED")
    slack.fail("chat.postMessage", status=500, channel=OPS_CHANNEL)
    message = await _held(client, slack, "DREFUSED", "Where is invoice 12?")
    assert message.meta["relay"] == "posting" and not _relays(slack, thread_ts, "invoice 12")
    await _check(client)
    await _check(client)
    posted = await wait_until(lambda: _relays(slack, thread_ts, "invoice 12"))
    assert len(posted) == 1 and posted[0]["metadata"]["event_payload"] == {"message_id": message.id}


async def test_a_thread_slack_could_not_read_once_is_read_again_and_the_message_relayed(client, slack):
    """A 5xx (or a timeout, a 429) reading the thread says nothing about the post: the message stays taken and the
    next check reads the thread again. Marked `unverified` at once, it was never relayed, for good."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DREADFAIL")
    slack.fail("chat.postMessage", status=500, channel=OPS_CHANNEL)
    message = await _held(client, slack, "DREADFAIL", "Refund for order 31?")
    assert message.meta["relay"] == "posting" and not _relays(slack, thread_ts, "order 31")
    slack.fail("conversations.replies", status=500)
    await _check(client)
    assert not _relays(slack, thread_ts, "order 31")
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "posting"
    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=2 * POSTING_STALE_SECONDS + 10))
    posted = await wait_until(lambda: _relays(slack, thread_ts, "order 31"))
    assert len(posted) == 1
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "done"


async def test_a_thread_slack_refuses_to_show_leaves_the_message_unverified(client, slack):
    """A refusal that stays (missing_scope: the app may not read the channel's history) cannot tell a post that
    landed from one that did not: marked `unverified`, never posted twice, and not read again every minute."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DNOSCOPE")
    slack.fail("chat.postMessage", status=500, channel=OPS_CHANNEL)
    message = await _held(client, slack, "DNOSCOPE", "Cancel order 45")
    slack.fail("conversations.replies", error="missing_scope")
    reads = slack.count("conversations.replies")
    await _check(client)
    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=2 * POSTING_STALE_SECONDS + 10))
    assert not _relays(slack, thread_ts, "order 45") and slack.count("conversations.replies") == reads + 1
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "unverified"


async def test_a_relay_whose_post_is_still_under_way_after_a_minute_is_not_posted_again(client, slack):
    """The worker's post may take past 60 s (Slack's client waits 30 s for an answer, and a 429 is tried again):
    taken then, a thread read finds no post yet and posted it a second time as the first one landed. A `posting`
    mark is taken only once no post can still be under way (`POSTING_STALE_SECONDS`)."""
    assert POSTING_STALE_SECONDS >= 2 * 30 + 2 + 60  # two client timeouts, the 429 wait, and room to spare
    _, thread_ts = await _escalated_and_claimed(client, slack, "DSLOW")
    slack.fail("chat.postMessage", status=500, channel=OPS_CHANNEL)  # stands for the post not answered yet
    message = await _held(client, slack, "DSLOW", "Track order 58")
    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=RELAY_STALE_SECONDS + 25))
    assert not _relays(slack, thread_ts, "order 58")
    async with client.services.sessions() as session:
        assert (await session.get(Message, message.id)).meta["relay"] == "posting"
    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=POSTING_STALE_SECONDS + 5))
    assert len(await wait_until(lambda: _relays(slack, thread_ts, "order 58"))) == 1
