"""The Slack operator channel against the fake Slack Web API, with really signed events and button clicks."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from sqlalchemy import func, select

from gateway.models import utcnow
from gateway.operators.slack_operator import THREAD_WAIT_SECONDS
from storage.models import Conversation, Escalation, EscalationEvent, Message
from tests.fakes.slack_api import BOT_USER_ID, sign
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _event(event: dict, event_id: str) -> bytes:
    return json.dumps({"type": "event_callback", "team_id": "T111", "event_id": event_id,
                       "authorizations": [{"user_id": BOT_USER_ID, "is_bot": True}], "event": event}).encode()


def _thread_reply(text: str, thread_ts: str, event_id: str, *, user: str = "UOPS", **fields) -> bytes:
    """A member's message in an escalation's thread of the operator channel, now."""
    return _event({"type": "message", "channel": OPS_CHANNEL, "channel_type": "channel", "user": user, "text": text,
                   "ts": f"{time.time():.6f}", "thread_ts": thread_ts, "parent_user_id": BOT_USER_ID, **fields}, event_id)


async def _post_event(client, body: bytes):
    headers = {"content-type": "application/json", **sign(body, secret=SIGNING_SECRET)}
    return await client.post("/webhooks/acme/slack/events", content=body, headers=headers)


async def _until_handled(client, text: str, *, direction: str | None = None) -> None:
    """Wait until the worker has finished with the message `text` (its relay included)."""
    async def handled() -> bool:
        query = select(Message.status).where(Message.text == text)
        if direction is not None:
            query = query.where(Message.direction == direction)
        async with client.services.sessions() as session:
            status = (await session.execute(query)).scalar_one_or_none()
        return status not in (None, "pending")

    await wait_until(handled)


async def test_slack_operator_thread_relays_both_ways(client, slack):
    # A customer on Slack (DM) asks for a person.
    ask = _event({"type": "message", "channel_type": "im", "channel": "DCUST", "user": "UCUST",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvAsk")
    assert (await _post_event(client, ask)).status_code == 200
    header = await wait_until(lambda: next((c for c in slack.calls_to("chat.postMessage")
                                        if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")), None))
    blocks = header.params["blocks"] if isinstance(header.params["blocks"], list) else json.loads(header.params["blocks"])
    actions = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert actions == ["escalation_claim", "escalation_resolve"]
    thread_ts = header.params["_ts"]
    escalation_id = int(blocks[1]["elements"][0]["value"])
    # The thread opens with the summary the console shows, so nobody needs the console to claim.
    summary = await wait_until(lambda: next((c for c in slack.calls_to("chat.postMessage")
                                         if c.params.get("thread_ts") == thread_ts), None))
    assert summary.params["text"].startswith("*Summary:*\n> Asked first: I need to talk to a human")
    assert "Escalated because:" in summary.params["text"]

    # The customer writes again: it appears in the operator thread, and the bot stays quiet.
    more = _event({"type": "message", "channel_type": "im", "channel": "DCUST", "user": "UCUST",
                   "text": "My order <!channel> is #42", "ts": f"{time.time():.6f}"}, "EvMore")
    await _post_event(client, more)
    relayed = await wait_until(lambda: next((c for c in slack.calls_to("chat.postMessage")
                                         if c.params.get("thread_ts") == thread_ts
                                         and c.params.get("text", "").startswith("*Customer:*")), None))
    assert "#42" in relayed.params["text"] and "<!channel>" not in relayed.params["text"]

    # A bad signature on the button endpoint is refused; a signed click claims.
    form = urlencode({"payload": json.dumps({"type": "block_actions", "user": {"id": "UOPS", "username": "dana"},
                                             "actions": [{"action_id": "escalation_claim",
                                                          "value": str(escalation_id)}]})}).encode()
    bad = await client.post("/webhooks/acme/slack/actions", content=form,
                            headers={"content-type": "application/x-www-form-urlencoded",
                                     **sign(form, secret="wrong-secret")})
    assert bad.status_code == 401
    ok = await client.post("/webhooks/acme/slack/actions", content=form,
                           headers={"content-type": "application/x-www-form-urlencoded",
                                    **sign(form, secret=SIGNING_SECRET)})
    assert ok.status_code == 200
    await client.services.slack_clicks.drain()  # acknowledged first, claimed after
    escalation = await client.services.escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "sam"  # UOPS's operator, as in the console
    await wait_until(lambda: slack.count("chat.update") >= 1)
    # The header names the claimer by their operator's name, not by the raw `slack:UOPS`.
    assert "Status: claimed by sam." in slack.calls_to("chat.update")[-1].params["text"]

    # Another member of the channel, who set the same display name, writes first in the thread: not
    # the claimer, so it does not reach the customer (a display name is anyone's to choose).
    before = len([c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DCUST"])
    impostor = _thread_reply("Send your card number here.", thread_ts, "EvImp", user="UIMP",
                             user_profile={"display_name": "dana"})
    await _post_event(client, impostor)
    refused = await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts
                                    and "Not sent to the customer" in c.params.get("text", "")])
    assert "claimed by sam" in refused[0].params["text"] and "slack:" not in refused[0].params["text"]
    assert not [c for c in slack.calls_to("chat.postMessage")
                if c.params.get("channel") == "DCUST" and "card number" in c.params.get("text", "")]

    # The operator replies in the thread: the customer gets it in their DM, with Slack's *bold* kept bold
    # (read as Markdown, it reached the customer in italics).
    reply = _thread_reply("Hi, Dana here. *Refund issued.*", thread_ts, "EvReply", user_profile={"display_name": "dana"})
    await _post_event(client, reply)
    to_customer = await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage")
                                        if c.params.get("channel") == "DCUST"][before:])
    assert to_customer[0].params["text"] == "Hi, Dana here. *Refund issued.*"  # mrkdwn bold
    # No echo of the operator's own reply back into the thread. Its relay emits the reply event (and so
    # posts any echo) before the worker marks the operator's message done: once it is, an echo was posted.
    await _until_handled(client, "Hi, Dana here. *Refund issued.*", direction="in")
    await client.services.escalations.drain()
    assert not [c for c in slack.calls_to("chat.postMessage")
                if c.params.get("thread_ts") == thread_ts and "Refund issued" in c.params.get("text", "")]

    # A worker that died after the relay and before marking the operator's message done handles it
    # again after the restart: the customer must not get a second copy.
    async with client.services.sessions() as session:
        operator_message = (await session.execute(select(Message).where(
            Message.direction == "in", Message.text == "Hi, Dana here. *Refund issued.*"))).scalar_one()
        conversation = await session.get(Conversation, operator_message.conversation_id)
    assert await client.services.slack_operator.intercept(operator_message, conversation)
    await client.services.escalations.drain()  # a repeated reply sends (and spawns) nothing; were it sent, it is by now
    assert [c.params["text"] for c in slack.calls_to("chat.postMessage")
            if c.params.get("channel") == "DCUST"][before:] == ["Hi, Dana here. *Refund issued.*"]


async def test_a_message_right_after_the_escalation_reaches_the_thread_while_slack_is_slow(client, slack):
    # Slack answers the operator channel's posts only after 1.5 s: the header is visible at Slack, but its ts (the
    # thread) is not stored yet when the customer's next message is handled. It must wait, not drop.
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    before = len(headers())
    slack.delays[f"chat.postMessage:{OPS_CHANNEL}"] = 1.5
    try:
        ask = _event({"type": "message", "channel_type": "im", "channel": "DSLOW", "user": "USLOW",
                      "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvSlowAsk")
        assert (await _post_event(client, ask)).status_code == 200
        header = (await wait_until(lambda: headers()[before:]))[0]
        more = _event({"type": "message", "channel_type": "im", "channel": "DSLOW", "user": "USLOW",
                       "text": "Order #77 never arrived", "ts": f"{time.time():.6f}"}, "EvSlowMore")
        await _post_event(client, more)
        relayed = await wait_until(lambda: next((c for c in slack.calls_to("chat.postMessage")
                                             if c.params.get("thread_ts") and c.params.get("thread_ts") == header.params.get("_ts")
                                             and c.params.get("text", "").startswith("*Customer:*")), None))
        assert "#77" in relayed.params["text"]
        # Done with it here: on a slow machine its handling can outlast the test, and a late post to the
        # channel (the relay, the thread's summary) would take the next tests' scripted Slack failures.
        await _until_handled(client, "Order #77 never arrived")
        # A post still waiting out the delay would take the next test's scripted failure when answered.
        # The relay's event is spawned just after the message is done, so the drain waits a moment first.
        await asyncio.sleep(0.2)
        await client.services.escalations.drain()
        await wait_until(lambda: slack.delayed == 0, what="no Slack call waiting out its delay")
    finally:
        slack.delays.clear()


async def test_a_header_slack_refused_is_posted_later_by_the_periodic_check_once(client, slack):
    # Slack refuses the header at the handoff: the periodic check posts it once the first post had its
    # chance, exactly once, and a second header for the same escalation is deleted again.
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    before = len(headers())
    slack.fail("chat.postMessage", channel=OPS_CHANNEL, error="service_unavailable")
    ask = _event({"type": "message", "channel_type": "im", "channel": "DDOWN", "user": "UDOWN",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvDownAsk")
    assert (await _post_event(client, ask)).status_code == 200
    refused = (await wait_until(lambda: headers()[before:]))[0]
    assert "_ts" not in refused.params
    more = _event({"type": "message", "channel_type": "im", "channel": "DDOWN", "user": "UDOWN",
                   "text": "Still waiting for order #88", "ts": f"{time.time():.6f}"}, "EvDownMore")
    await _post_event(client, more)
    blocks = refused.params["blocks"] if isinstance(refused.params["blocks"], list) else json.loads(refused.params["blocks"])
    escalation_id = int(blocks[1]["elements"][0]["value"])
    services = client.services
    await services.escalations.drain()
    assert (await services.escalations.get(escalation_id, bots=None)).slack_ts is None

    # Too young: its first post may still be in flight.
    assert escalation_id not in await services.slack_operator.post_missing_headers(utcnow())
    later = utcnow() + timedelta(seconds=THREAD_WAIT_SECONDS + 1)
    await services.reminders.run_once(now=later)
    escalation = await services.escalations.get(escalation_id, bots=None)
    late = headers()[before + 1:]
    assert len(late) == 1 and escalation.slack_ts == late[0].params["_ts"]
    # What the customer wrote meanwhile follows into the late thread.
    thread = [c.params["text"] for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == escalation.slack_ts]
    assert any("#88" in text and "earlier" in text for text in thread)
    assert thread[0].startswith("*Summary:*\n> Asked first: I need to talk to a human")  # before the relayed ones
    assert escalation_id not in await services.slack_operator.post_missing_headers(later)
    # The worker holds "#88" until it finds the thread (up to THREAD_WAIT_SECONDS) and then relays it too;
    # it must be done here, or its post to the channel would take the next test's scripted Slack failure.
    await _until_handled(client, "Still waiting for order #88")

    # Another replica's header that lost the race is deleted, and the thread stays the first one.
    assert not await services.slack_operator._post_escalation(escalation, OPS_CHANNEL)
    assert slack.deleted[-1] == headers()[-1].params["_ts"] != escalation.slack_ts
    assert (await services.escalations.get(escalation_id, bots=None)).slack_ts == escalation.slack_ts


async def test_a_header_slack_took_without_answering_is_found_not_posted_twice(client, slack):
    # Slack posted the header but the answer was lost: the periodic check finds it in the channel's
    # history and makes it the thread, instead of posting a second header.
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    before = len(headers())
    slack.fail("chat.postMessage", channel=OPS_CHANNEL, status=500, error="internal_error", landed=True)
    ask = _event({"type": "message", "channel_type": "im", "channel": "DLOST", "user": "ULOST",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvLostAsk")
    assert (await _post_event(client, ask)).status_code == 200
    landed = (await wait_until(lambda: headers()[before:]))[0]
    await client.services.escalations.drain()
    blocks = landed.params["blocks"] if isinstance(landed.params["blocks"], list) else json.loads(landed.params["blocks"])
    escalation_id = int(blocks[1]["elements"][0]["value"])
    assert (await client.services.escalations.get(escalation_id, bots=None)).slack_ts is None

    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=THREAD_WAIT_SECONDS + 1))
    assert len(headers()) == before + 1  # no second header
    assert (await client.services.escalations.get(escalation_id, bots=None)).slack_ts == landed.params["_ts"]


async def test_a_members_message_that_reads_like_a_header_is_not_taken_for_the_thread(client, slack):
    # The header was refused; someone in the channel wrote "Escalation #N (acme)…" meanwhile. That is
    # not the app's post: the customer's messages must go under a header the app posts, not under it.
    slack.fail("chat.postMessage", channel=OPS_CHANNEL, error="service_unavailable")
    ask = _event({"type": "message", "channel_type": "im", "channel": "DFAKE", "user": "UFAKE",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, "EvFakeAsk")
    assert (await _post_event(client, ask)).status_code == 200
    await wait_until(lambda: any(c.params.get("channel") == "DFAKE" for c in slack.calls_to("chat.postMessage")))
    await client.services.escalations.drain()
    async with client.services.sessions() as session:
        escalation_id = (await session.execute(select(func.max(Escalation.id)))).scalar_one()
    planted = slack.say(OPS_CHANNEL, f"Escalation #{escalation_id} (acme): reply in this thread")

    await client.services.reminders.run_once(now=utcnow() + timedelta(seconds=THREAD_WAIT_SECONDS + 1))
    thread = (await client.services.escalations.get(escalation_id, bots=None)).slack_ts
    assert thread is not None and thread != planted
    assert any(c.params.get("_ts") == thread and c.params.get("blocks") for c in slack.calls_to("chat.postMessage"))


async def test_a_customer_answering_in_their_channel_thread_reaches_the_operator_thread(client, slack):
    # The customer asked in a channel by mentioning the bot; the handoff was acknowledged in a thread under
    # their message, so their later replies there name them as the thread's author (parent_user_id).
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    before = len(headers())
    question_ts = f"{time.time():.6f}"
    ask = _event({"type": "app_mention", "channel_type": "channel", "channel": "CCHAN", "user": "UCHAN",
                  "text": f"<@{BOT_USER_ID}> I need to talk to a human", "ts": question_ts}, "EvChanAsk")
    assert (await _post_event(client, ask)).status_code == 200
    thread_ts = (await wait_until(lambda: headers()[before:]))[0].params["_ts"]
    more = _event({"type": "message", "channel_type": "channel", "channel": "CCHAN", "user": "UCHAN",
                   "text": "My order is #55", "ts": f"{time.time():.6f}", "thread_ts": question_ts,
                   "parent_user_id": "UCHAN"}, "EvChanMore")
    assert (await _post_event(client, more)).status_code == 200
    relayed = await wait_until(lambda: [c.params["text"] for c in slack.calls_to("chat.postMessage")
                                        if c.params.get("thread_ts") == thread_ts
                                        and c.params.get("text", "").startswith("*Customer:*")])
    assert relayed == ["*Customer:*\n> My order is #55"]
    await _until_handled(client, "My order is #55")
    await client.services.escalations.drain()


def _click(payload) -> bytes:
    # A str is the payload's JSON as sent: json.dumps cannot write 100,000 levels of nesting.
    return urlencode({"payload": payload if isinstance(payload, str) else json.dumps(payload)}).encode()


@pytest.mark.parametrize(("payload", "reason"), [
    ([1], "`payload` must be a JSON object"),
    ({"type": "block_actions", "user": "U1", "actions": []}, "`user`"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": "x"}, "`actions`"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": [1]}, "`actions`"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "escalation_claim", "value": None}]},
     "escalation_claim button's `value`"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "escalation_resolve",
                                                                  "value": str(10**30)}]}, "escalation id"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "escalation_claim",
                                                                  "value": "9" * 5000}]}, "escalation id"),
    ({"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "escalation_claim",
                                                                  "value": str(2**31)}]}, "escalation id"),
    # json.loads raised RecursionError: a 500, which Slack would send again.
    ("[" * 100_000 + "]" * 100_000, "`payload` is nested too deeply"),
    ('{"type": "block_actions", "user": {"id": "U1"}, "actions": [' + "[" * 100_000 + "]" * 100_000 + "]}",
     "`payload` is nested too deeply"),
], ids=["list", "user-string", "actions-string", "action-number", "value-null", "value-huge", "value-5000-digits",
        "value-past-int32", "nested-100000-deep", "actions-nested-100000-deep"])
async def test_slack_actions_signed_malformed_payload_is_400_and_changes_nothing(client, slack, payload, reason):
    services = client.services
    async with services.sessions() as session:
        before = (await session.execute(select(func.count()).select_from(EscalationEvent))).scalar_one()
    form = _click(payload)
    response = await client.post("/webhooks/acme/slack/actions", content=form, headers={
        "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})
    assert response.status_code == 400 and reason in response.json()["error"]
    assert response.headers["X-Slack-No-Retry"] == "1"
    async with services.sessions() as session:
        assert (await session.execute(select(func.count()).select_from(EscalationEvent))).scalar_one() == before


async def test_slack_actions_another_apps_button_is_acknowledged_and_ignored(client, slack):
    form = _click({"type": "block_actions", "user": {"id": "U1"},
                   "actions": [{"action_id": "vote", "value": None}]})
    response = await client.post("/webhooks/acme/slack/actions", content=form, headers={
        "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})
    assert response.status_code == 200


async def _escalation_row(client, *, bot: str, chat: str, slack_ts: str) -> int:
    """An open escalation of a web conversation, stored directly, whose header is Slack message `slack_ts`."""
    async with client.services.sessions() as session, session.begin():
        conversation = Conversation(bot=bot, channel="web", chat=chat)
        session.add(conversation)
        await session.flush()
        escalation = Escalation(bot=bot, conversation_id=conversation.id, slack_ts=slack_ts)
        session.add(escalation)
        await session.flush()
        return escalation.id


async def test_a_click_on_another_bots_escalation_is_not_answered_in_that_bots_thread(client, slack):
    """Refused clicks are explained in the escalation's thread. For another bot's escalation (NotFound
    here) that thread is not this bot's: the refusal was posted under the other bot's header."""
    from gateway.operators.slack_actions import Click

    escalation_id = await _escalation_row(client, bot="globex", chat="elsewhere", slack_ts="1700000000.000100")
    before = len(slack.calls_to("chat.postMessage"))
    outcome = await client.services.slack_operator.handle_action(
        "acme", Click(user_id="UOPS", action_id="escalation_claim", escalation_id=escalation_id))
    assert outcome.startswith("refused:")
    await client.services.escalations.drain()  # the refusal is posted in handle_action, if anywhere; nothing else follows
    assert [c for c in slack.calls_to("chat.postMessage")[before:]
            if c.params.get("thread_ts") == "1700000000.000100"] == []


async def test_a_button_left_on_a_deleted_escalations_header_does_not_act_on_the_one_that_took_its_id(client, slack):
    # SQLite gives a deleted row's id again: the old header's Claim then named a new customer's escalation.
    escalation_id = await _escalation_row(client, bot="acme", chat="took-the-id", slack_ts="1700000000.000900")
    # A second header of the same escalation (posted after it began: the first post's answer was lost and
    # the history could not be read) still acts; the old header posted before it began does not.
    second = f"{time.time() + 5:.6f}"
    for header_ts, state in (("1700000000.000800", "open"), (second, "claimed"), ("1700000000.000900", "claimed")):
        form = _click({"type": "block_actions", "user": {"id": "UOPS"}, "container": {
            "type": "message", "message_ts": header_ts, "channel_id": OPS_CHANNEL},
            "actions": [{"action_id": "escalation_claim", "value": str(escalation_id)}]})
        response = await client.post("/webhooks/acme/slack/actions", content=form, headers={
            "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})
        assert response.status_code == 200
        await client.services.slack_clicks.drain()
        assert (await client.services.escalations.get(escalation_id, bots=None)).state == state, header_ts
