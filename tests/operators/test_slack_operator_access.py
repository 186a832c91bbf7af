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
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET, SLACK_MEMBERS, auth
from tests.operators.test_slack_operator import _event, _post_event, _thread_reply, _until_handled

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _click(client, member: str, action: str, escalation_id: int, header_ts: str):
    response = await _post_click(client, member, action, escalation_id, header_ts)
    await client.services.slack_clicks.drain()  # acknowledged first, acted on after
    return response


async def _post_click(client, member: str, action: str, escalation_id: int, header_ts: str):
    form = urlencode({"payload": json.dumps({
        "type": "block_actions", "user": {"id": member, "username": "someone"},
        "container": {"type": "message", "message_ts": header_ts, "channel_id": OPS_CHANNEL},
        "actions": [{"action_id": action, "value": str(escalation_id)}]})}).encode()
    return await client.post("/webhooks/acme/slack/actions", content=form, headers={
        "content-type": "application/x-www-form-urlencoded", **sign(form, secret=SIGNING_SECRET)})


def _told(slack, member: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postEphemeral") if c.params.get("user") == member]


def _headers(slack) -> list:
    return [c for c in slack.calls_to("chat.postMessage")
            if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]


async def asked_for_a_person(client, slack, customer: str) -> tuple[int, str]:
    """A Slack customer (DM `customer`) asks for a person: (escalation id, thread ts), once the thread has its
    summary."""
    before = len(_headers(slack))
    ask = _event({"type": "message", "channel_type": "im", "channel": customer, "user": "UCUST",
                  "text": "I need to talk to a human", "ts": f"{time.time():.6f}"}, f"Ev{customer}Ask")
    assert (await _post_event(client, ask)).status_code == 200
    header = await wait_until(lambda: next(iter(_headers(slack)[before:]), None))
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
    # Each is told what would let them act: a guest has no operator whose `slack_user_ids` an admin could
    # extend (they were told of "your operator's" all the same), lee's operator has to serve this bot.
    [guest, _] = _told(slack, "UGUEST")
    assert "No operator in the gateway's config names your Slack member id UGUEST" in guest
    assert "your operator" not in guest.lower()
    [lee, _] = _told(slack, SLACK_MEMBERS["lee"])
    assert "is operator lee's, which would need to serve this bot (add acme to its `bots`):" in lee
    assert "a token" not in lee  # lee has one
    assert slack.count("chat.update") == 0  # the header was not touched

    assert (await _click(client, SLACK_MEMBERS["sam"], "escalation_claim", escalation_id, thread_ts)).status_code == 200
    escalation = await escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "sam"

    # A guest's thread reply does not reach the customer; the operator's does.
    to_customer = len([c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DACCESS"])
    await _post_event(client, _thread_reply("Pay here: evil.example", thread_ts, "EvAccessGuest", user="UGUEST"))
    await wait_until(lambda: len(_told(slack, "UGUEST")) == 3)
    assert _told(slack, "UGUEST")[-1].startswith("You are not an operator")
    assert slack.calls_to("chat.postEphemeral")[-1].params["thread_ts"] == thread_ts  # in the thread they wrote in
    await _post_event(client, _thread_reply("Refund issued.", thread_ts, "EvAccessOps"))
    await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage")
                              if c.params.get("channel") == "DACCESS"][to_customer:])
    await _until_handled(client, "Refund issued.", direction="in")  # its relay is done: a second copy is sent by now
    assert [c.params["text"] for c in slack.calls_to("chat.postMessage")
            if c.params.get("channel") == "DACCESS"][to_customer:] == ["Refund issued."]

    assert (await _click(client, "UGUEST", "escalation_resolve", escalation_id, thread_ts)).status_code == 200
    assert (await escalations.get(escalation_id, bots=None)).state == "claimed"
    assert (await _click(client, SLACK_MEMBERS["sam"], "escalation_resolve", escalation_id, thread_ts)).status_code == 200
    assert (await escalations.get(escalation_id, bots=None)).state == "resolved"
    await escalations.drain()


async def test_a_mapped_member_acts_as_their_operator_so_console_and_slack_are_one_holder(client, slack):
    """Held as `slack:UOPS`, sam's claim in the console made sam's own Slack reply a conflict with himself."""
    escalation_id, thread_ts = await asked_for_a_person(client, slack, "DSAME")
    escalations = client.services.escalations
    assert (await client.post(f"/v1/escalations/{escalation_id}/claim", headers=auth("sam"))).status_code == 200
    to_customer = len([c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DSAME"])

    # sam, in Slack, answers the thread he holds in the console: it reaches the customer.
    await _post_event(client, _thread_reply("Your refund is on its way.", thread_ts, "EvSameReply"))
    sent = await wait_until(lambda: [c.params["text"] for c in slack.calls_to("chat.postMessage")
                                     if c.params.get("channel") == "DSAME"][to_customer:])
    assert sent == ["Your refund is on its way."]

    # kim takes it in Slack, as kim: refused while sam holds it, with sam's member mentioned, not a stranger.
    assert (await _click(client, SLACK_MEMBERS["kim"], "escalation_claim", escalation_id, thread_ts)).status_code == 200
    refusal = await wait_until(lambda: [c.params["text"] for c in slack.calls_to("chat.postMessage") if
                                        c.params.get("thread_ts") == thread_ts and "already claimed" in c.params["text"]])
    assert refusal == [f"<@{SLACK_MEMBERS['kim']}>: escalation {escalation_id} is already claimed by sam"]

    resolved = await _click(client, SLACK_MEMBERS["sam"], "escalation_resolve", escalation_id, thread_ts)
    assert resolved.status_code == 200
    shown = (await client.get(f"/v1/escalations/{escalation_id}", headers=auth("sam"))).json()
    assert shown["state"] == "resolved" and shown["operator"] == "sam"
    assert {e["actor"] for e in shown["events"] if e["kind"] in ("claimed", "reply", "resolved")} == {"sam"}
    await escalations.drain()


def held_claims(escalations, monkeypatch) -> asyncio.Event:
    """Make `escalations.claim` wait until the returned event is set: a click whose work is slow."""
    release, claim = asyncio.Event(), escalations.claim

    async def slow_claim(*args, **kwargs):
        await release.wait()
        return await claim(*args, **kwargs)
    monkeypatch.setattr(escalations, "claim", slow_claim)
    return release


async def test_a_click_is_answered_before_its_slow_work_and_still_claims(client, slack, monkeypatch):
    """Slack shows the member an error when a click is not answered within 3 s, though it worked: the
    claim's write and posts (a rate-limit wait among them) were done before the answer."""
    escalation_id, thread_ts = await asked_for_a_person(client, slack, "DSLOW")
    escalations = client.services.escalations
    release = held_claims(escalations, monkeypatch)
    # The claim is held until released below: an answer that waited for it would never come, so the wait can be
    # long enough for a loaded machine (2 s was not always).
    response = await asyncio.wait_for(
        _post_click(client, SLACK_MEMBERS["sam"], "escalation_claim", escalation_id, thread_ts), timeout=30)
    assert response.status_code == 200
    assert (await escalations.get(escalation_id, bots=None)).state == "open"  # answered while the claim waits
    release.set()
    await client.services.slack_clicks.drain()
    escalation = await escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "sam"
    await escalations.drain()


def _revised(member: str, thread_ts: str, ts: str, before: str, after: str | None, event_id: str) -> bytes:
    """Slack's `message_changed` (to `after`) or, with `after=None`, `message_deleted` of `member`'s thread message."""
    original = {"type": "message", "user": member, "text": before, "ts": ts, "thread_ts": thread_ts}
    event = {"type": "message", "channel": OPS_CHANNEL, "hidden": True, "ts": f"{time.time():.6f}",
             "previous_message": original}
    if after is None:
        event |= {"subtype": "message_deleted", "deleted_ts": ts}
    else:
        event |= {"subtype": "message_changed", "message": {**original, "text": after, "edited": {"user": member}}}
    return _event(event, event_id)


async def test_a_non_operator_is_refused_once_per_message_not_again_on_each_edit(client, slack):
    """Each edit (and the deletion) of a thread message the member had been refused for was refused again:
    another "You are not an operator" for every typo fixed."""
    _, thread_ts = await asked_for_a_person(client, slack, "DONCE")
    ts = f"{time.time():.6f}"
    await _post_event(client, _thread_reply("Try restarting it", thread_ts, "EvOnceGuest", user="UGUEST3", ts=ts))
    await wait_until(lambda: _told(slack, "UGUEST3"))
    for number, (before, after) in enumerate([("Try restarting it", "Try restarting it."),
                                              ("Try restarting it.", "Try restarting it twice."),
                                              ("Try restarting it twice.", None)]):
        assert (await _post_event(client, _revised("UGUEST3", thread_ts, ts, before, after, f"EvOnceEdit{number}"))).status_code == 200
    # The thread's messages are handled in order: once the operator's reply is relayed, the edits were handled too.
    await _post_event(client, _thread_reply("Hello, sam here.", thread_ts, "EvOnceOps"))
    await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage")
                              if c.params.get("channel") == "DONCE" and c.params.get("text") == "Hello, sam here."])
    told = _told(slack, "UGUEST3")
    assert len(told) == 1 and told[0].startswith("You are not an operator")
    await client.services.escalations.drain()


async def test_a_resolve_clicked_twice_by_its_operator_is_not_answered_as_a_conflict(client, slack):
    """Slack leaves the button live until the header is updated: the second click of a double click on Resolve
    was refused as a conflict with the operator's own first, and the thread read, for everyone, "<@UOPS>:
    escalation … is already resolved by sam", as a retried Claim by its holder is not."""
    escalation_id, thread_ts = await asked_for_a_person(client, slack, "DTWICE")
    assert (await _click(client, SLACK_MEMBERS["sam"], "escalation_claim", escalation_id, thread_ts)).status_code == 200
    first = _post_click(client, SLACK_MEMBERS["sam"], "escalation_resolve", escalation_id, thread_ts)
    second = _post_click(client, SLACK_MEMBERS["sam"], "escalation_resolve", escalation_id, thread_ts)
    assert [r.status_code for r in await asyncio.gather(first, second)] == [200, 200]
    await client.services.slack_clicks.drain()
    assert (await client.services.escalations.get(escalation_id, bots=None)).state == "resolved"
    await client.services.escalations.drain()
    assert not [c for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts
                and "already" in c.params.get("text", "")]
