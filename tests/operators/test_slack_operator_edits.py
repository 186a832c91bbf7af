"""An operator's edit or deletion, in the Slack thread, of a reply already relayed to the customer reaches
the customer where their platform can change a sent message, and is told to the operator where it cannot.
Why: the edit was ignored as "an edit of a message already answered", and the customer kept the first
version (a wrong amount, a wrong date) while the operator saw it corrected in Slack."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from sqlalchemy import select

from storage.models import Message, RemovedChat
from tests.conftest import app_client
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack, sign
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels.conftest import wait_until
from tests.gateway_channels.test_telegram_e2e import SECRET as TG_SECRET
from tests.gateway_channels.test_telegram_e2e import TOKEN as TG_TOKEN
from tests.gateway_channels.test_telegram_e2e import update as tg_update
from tests.gateway_channels.whatsapp_rig import ACCOUNT_SID, AUTH_TOKEN, BOT_NUMBER, PUBLIC_URL, inbound, post
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET, TOKENS
from tests.operators.test_slack_operator import _event, _post_event, _thread_reply
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _revision(subtype: str, thread_ts: str, ts: str, text: str, event_id: str, *, new_text: str = "") -> bytes:
    """Slack's message_changed / message_deleted of member UOPS's thread message `ts`."""
    before = {"type": "message", "user": "UOPS", "text": text, "ts": ts, "thread_ts": thread_ts}
    event = {"type": "message", "subtype": subtype, "channel": OPS_CHANNEL, "hidden": True, "ts": f"{time.time():.6f}",
             "previous_message": before}
    if subtype == "message_changed":
        event["message"] = {**before, "text": new_text, "edited": {"user": "UOPS", "ts": event["ts"]}}
    else:
        event["deleted_ts"] = ts
    return _event(event, event_id)


async def _relayed(client, text: str) -> Message:
    """The reply sent to the customer for the operator's thread message `text`, once it is sent."""
    async def sent():
        async with client.services.sessions() as session:
            return (await session.execute(select(Message).where(
                Message.direction == "out", Message.author == "operator", Message.text == text,
                Message.status == "sent"))).scalar_one_or_none()

    return await wait_until(sent)


async def _thread_recorded(client, escalation_id: int, thread_ts: str) -> None:
    """The gateway has stored the thread it posted (the fake answered the post first: an operator's reply
    posted before the store found no escalation in that thread, and was never relayed)."""
    async def recorded():
        return (await client.services.escalations.get(escalation_id, bots=None)).slack_ts == thread_ts

    await wait_until(recorded, what="the escalation's thread stored")


async def _retried(client, body: bytes) -> None:
    """Slack's retry of the event `body` (its first delivery answered late, `X-Slack-Retry-Num`)."""
    headers = {"content-type": "application/json", "x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout",
               **sign(body, secret=SIGNING_SECRET)}
    assert (await client.post("/webhooks/acme/slack/events", content=body, headers=headers)).status_code == 200


def _told(slack, thread_ts: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postEphemeral") if c.params.get("thread_ts") == thread_ts]


async def test_an_operators_edit_and_deletion_reach_a_customer_whose_platform_edits(client, slack):
    _, thread_ts = await _escalated_and_claimed(client, slack, "DEDIT")
    ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply("Your refund is 10 EUR.", thread_ts, "EvEditReply", ts=ts))).status_code == 200
    reply = await _relayed(client, "Your refund is 10 EUR.")
    [customer_ts] = reply.provider_ids

    edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvEdit", new_text="Your refund is *12* EUR.")
    assert (await _post_event(client, edited)).status_code == 200
    update = await wait_until(lambda: [c.params for c in slack.calls_to("chat.update") if c.params.get("channel") == "DEDIT"])
    assert update[0]["ts"] == customer_ts and update[0]["text"] == "Your refund is *12* EUR."
    await _relayed(client, "Your refund is **12** EUR.")  # what the console and transcript show, as Markdown
    assert not _told(slack, thread_ts)

    deleted = _revision("message_deleted", thread_ts, ts, "Your refund is *12* EUR.", "EvDelete")
    assert (await _post_event(client, deleted)).status_code == 200
    # Slack lets no bot delete a DM message of its own here: blanked, as the streamer does.
    blanked = await wait_until(lambda: [c.params for c in slack.calls_to("chat.update")
                                        if c.params.get("channel") == "DEDIT"][1:])
    assert blanked[0]["ts"] == customer_ts and blanked[0]["text"] == "—"
    # Neither the edit nor the deletion was answered by the bot, in the thread or anywhere.
    assert not [c for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts
                and "12" in c.params.get("text", "")]


async def test_an_operators_edit_of_a_web_chat_reply_is_stored_and_the_operator_told_an_open_page_keeps_it(client, slack):
    def headers():
        return [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == OPS_CHANNEL and c.params.get("blocks")]

    before = len(headers())
    asked = await client.post("/v1/bots/acme/chat", json={"session_id": "web-edit-1", "text": "I need to talk to a human"})
    assert asked.status_code == 200
    header = (await wait_until(lambda: headers()[before:]))[0]
    thread_ts = header.params["_ts"]
    blocks = header.params["blocks"] if isinstance(header.params["blocks"], list) else json.loads(header.params["blocks"])
    await _thread_recorded(client, int(blocks[1]["elements"][0]["value"]), thread_ts)
    await client.services.escalations.claim(int(blocks[1]["elements"][0]["value"]), operator="sam", bots=None)
    ts = f"{time.time():.6f}"
    await _post_event(client, _thread_reply("Your order ships Monday.", thread_ts, "EvWebReply", ts=ts))
    await _relayed(client, "Your order ships Monday.")

    edited = _revision("message_changed", thread_ts, ts, "Your order ships Monday.", "EvWebEdit",
                       new_text="Your order ships Tuesday.")
    assert (await _post_event(client, edited)).status_code == 200
    told = await wait_until(lambda: _told(slack, thread_ts))
    assert "a page they have open now still shows the first version" in told[0]
    transcript = (await client.get("/v1/bots/acme/sessions/web-edit-1/messages")).json()["messages"]
    assert [m["text"] for m in transcript if m["author"] == "operator"] == ["Your order ships Tuesday."]


@contextlib.asynccontextmanager
async def _customer_app(tmp_path, slack, channels: dict, env: dict):
    """The app with bot `acme` on the customer's `channels` and the operator channel on the fake `slack`."""
    slack_channel = {"bot_token": "${OPS_SLACK_BOT}", "signing_secret": "${OPS_SLACK_SECRET}",
                     "api_base": slack.api_base, "operator_channel": OPS_CHANNEL}
    operators = [{"name": "sam", "token": "${OPS_SAM_TOKEN}", "bots": ["acme"], "slack_user_ids": ["UOPS"]}]
    env = {**env, "OPS_SLACK_BOT": BOT_TOKEN, "OPS_SLACK_SECRET": SIGNING_SECRET, "OPS_SAM_TOKEN": TOKENS["sam"]}
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {**channels, "slack": slack_channel}}],
                          operators=operators, env=env) as client:
        yield client


@contextlib.asynccontextmanager
async def _whatsapp_customer(tmp_path, message_sid: str, number: str):
    """(client, fake Slack, fake Twilio): the app with a WhatsApp customer, `number`, whose message
    `message_sid` asked for a human."""
    slack, twilio = await FakeSlack.start(), FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    whatsapp = {"whatsapp": {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}", "from_number": BOT_NUMBER,
                             "public_url": PUBLIC_URL, "api_base": twilio.base_url}}
    try:
        async with _customer_app(tmp_path, slack, whatsapp, {"WA_SID": ACCOUNT_SID, "WA_TOKEN": AUTH_TOKEN}) as client:
            assert (await post(client, inbound(message_sid, number, "I need to talk to a human"))).status_code == 200
            yield client, slack, twilio
    finally:
        twilio.stop()
        await slack.stop()


async def _claimed(client, slack) -> str:
    """Operator sam claims the escalation just opened: its thread's ts."""
    header = await wait_until(lambda: [c for c in slack.calls_to("chat.postMessage") if c.params.get("blocks")])
    thread_ts, blocks = header[0].params["_ts"], header[0].params["blocks"]
    escalation_id = int((blocks if isinstance(blocks, list) else json.loads(blocks))[1]["elements"][0]["value"])
    await _thread_recorded(client, escalation_id, thread_ts)
    await client.services.escalations.claim(escalation_id, operator="sam", bots=None)
    return thread_ts


async def _operator_replied(client, slack, text: str) -> tuple[str, str, Message]:
    """Operator sam claims the escalation just opened and replies `text` in its thread: (thread ts, the
    reply's ts in Slack, the reply once sent to the customer)."""
    thread_ts, ts = await _claimed(client, slack), f"{time.time():.6f}"
    await _post_event(client, _thread_reply(text, thread_ts, f"Ev{ts}", ts=ts))
    return thread_ts, ts, await _relayed(client, text)


@contextlib.asynccontextmanager
async def _telegram_customer(tmp_path, update: dict, reply_text: str = "Your refund is 10 EUR."):
    """(client, fake Slack, fake Telegram, the operator's thread ts, the reply's ts in Slack, the reply once
    sent): the app with a Telegram customer, whose `update` asked for a human, answered `reply_text` by operator sam."""
    slack = await FakeSlack.start()
    try:
        async with FakeTelegramAPI(TG_TOKEN) as telegram, _customer_app(tmp_path, slack, {"telegram": {
                "token": "${TG_TOKEN}", "webhook_secret": "${TG_SECRET}", "api_base": telegram.base_url}},
                {"TG_TOKEN": TG_TOKEN, "TG_SECRET": TG_SECRET}) as client:
            asked = await client.post("/webhooks/acme/telegram", json=update,
                                      headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET})
            assert asked.status_code == 200
            thread_ts, ts, reply = await _operator_replied(client, slack, reply_text)
            yield client, slack, telegram, thread_ts, ts, reply
    finally:
        await slack.stop()


async def test_an_operators_edit_and_deletion_reach_a_telegram_customer(tmp_path):
    async with _telegram_customer(tmp_path, tg_update(1, 777, "I need to talk to a human")) as (
            client, slack, telegram, thread_ts, ts, reply):
        [sent] = [m for m in telegram.sent if str(m.message_id) == reply.provider_ids[0]]

        edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvTgEdit",
                           new_text="Your refund is *12* EUR.")
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: sent.edits)
        assert sent.text == "Your refund is 12 EUR." and sent.entities[0]["type"] == "bold"

        deleted = _revision("message_deleted", thread_ts, ts, "Your refund is *12* EUR.", "EvTgDelete")
        assert (await _post_event(client, deleted)).status_code == 200
        await wait_until(lambda: sent.deleted)
        assert not _told(slack, thread_ts)


async def test_an_operators_edit_in_a_telegram_group_keeps_the_members_mention(tmp_path):
    """In a group the operator's reply starts with a mention of the member it is for: the edit dropped it."""
    earlier = {"message_id": 70, "date": 1700000000, "chat": {"id": -1001012, "type": "supergroup"},
               "from": {"id": int(TG_TOKEN.split(":")[0]), "is_bot": True, "first_name": "Support"}, "text": "Ask me."}
    asked = tg_update(2, -1001012, "I need to talk to a human", chat_type="supergroup", message_id=77,
                      reply_to_message=earlier)
    async with _telegram_customer(tmp_path, asked) as (client, slack, telegram, thread_ts, ts, reply):
        [sent] = [m for m in telegram.sent if str(m.message_id) == reply.provider_ids[0]]
        assert sent.text == "Ann Your refund is 10 EUR." and sent.entities[0]["type"] == "text_mention"

        edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvTgGroupEdit",
                           new_text="Your refund is 12 EUR.")
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: sent.edits)
        assert sent.text == "Ann Your refund is 12 EUR."
        assert sent.entities[0]["type"] == "text_mention" and sent.entities[0]["user"]["id"] == 5550001


async def test_an_operators_edit_refused_as_the_customer_blocked_the_bot_stores_the_removal(tmp_path):
    """The customer blocked the bot after the operator's reply: the edit's 403 was told to the operator, but no
    removal was stored, as the outbox stores a send's, and each later reply to that chat went out for a 403."""
    async with _telegram_customer(tmp_path, tg_update(1, 778, "I need to talk to a human")) as (
            client, slack, telegram, thread_ts, ts, _):
        telegram.fail_next("editMessageText", status=403, description="Forbidden: bot was blocked by the user")
        edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvTgBlocked",
                           new_text="Your refund is 12 EUR.")
        assert (await _post_event(client, edited)).status_code == 200
        [told] = await wait_until(lambda: _told(slack, thread_ts), what="the operator told")
        assert "did not reach the customer" in told and "blocked" in told

        async def removed():
            async with client.services.sessions() as session:
                return (await session.execute(select(RemovedChat.chat))).scalars().all()

        assert await wait_until(removed, timeout=5, what="the removal stored") == ["778"]


async def test_an_operators_edit_of_a_whatsapp_reply_tells_them_the_customer_still_has_the_first_version(tmp_path):
    """WhatsApp cannot change a sent message: the operator is told so, in a message only they see."""
    async with _whatsapp_customer(tmp_path, "SMedit1", "+15550001111") as (client, slack, twilio):
        thread_ts, ts, _ = await _operator_replied(client, slack, "It arrives on the 3rd.")
        sends = len(twilio.state.requests)

        edited = _revision("message_changed", thread_ts, ts, "It arrives on the 3rd.", "EvWaEdit",
                           new_text="It arrives on the 4th.")
        assert (await _post_event(client, edited)).status_code == 200
        told = await wait_until(lambda: _told(slack, thread_ts))
        assert told[0].startswith("WhatsApp cannot change a message once sent: the customer still has the first")
        assert len(twilio.state.requests) == sends  # nothing more went to the customer
        await _relayed(client, "It arrives on the 3rd.")  # what the customer has, as the console shows it


def _revised_while_relayed(client, monkeypatch, revision: bytes) -> None:
    """Slack's `revision` of the operator's thread message comes while the gateway relays that message (in
    `escalations.reply`, once)."""
    escalations = client.services.escalations
    relay = escalations.reply

    async def revised_meanwhile(*args, **kwargs):
        monkeypatch.setattr(escalations, "reply", relay)
        assert (await _post_event(client, revision)).status_code == 200
        return await relay(*args, **kwargs)

    monkeypatch.setattr(escalations, "reply", revised_meanwhile)


async def test_an_operators_edit_made_while_their_reply_was_relayed_reaches_the_customer(client, slack, monkeypatch):
    """The edit applied to the operator's message while it waited (the inbox's `_revise`) landed after the relay
    had read its text: the customer got the first version, the message was marked done with the new one, and
    nothing passed the edit on, while the operator saw it corrected in Slack."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DRACE")
    ts = f"{time.time():.6f}"
    _revised_while_relayed(client, monkeypatch, _revision(
        "message_changed", thread_ts, ts, "Pick-up at 9.", "EvRaceEdit", new_text="Pick-up at 10."))
    assert (await _post_event(client, _thread_reply("Pick-up at 9.", thread_ts, "EvRaceReply", ts=ts))).status_code == 200
    update = await wait_until(lambda: [c.params for c in slack.calls_to("chat.update") if c.params.get("channel") == "DRACE"])
    reply = await _relayed(client, "Pick-up at 10.")
    sent = [c.params for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "DRACE"]
    assert [p["_ts"] for p in sent if p["text"] == "Pick-up at 9."] == reply.provider_ids == [update[0]["ts"]]
    assert update[0]["text"] == "Pick-up at 10."
    assert "Pick-up at 10." not in [p["text"] for p in sent]  # passed on as the edit it is, not a second reply


async def test_an_operators_deletion_made_while_their_reply_was_relayed_takes_the_reply_back(client, slack, monkeypatch):
    """The deletion found the operator's message still waiting (the relay under way) and marked it taken back,
    so the relay's finish found it no longer pending and stopped there: the customer kept the reply the
    operator had deleted in Slack, and nothing passed the deletion on."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DRACEDEL")
    ts = f"{time.time():.6f}"
    _revised_while_relayed(client, monkeypatch, _revision(
        "message_deleted", thread_ts, ts, "Your code is 4711.", "EvRaceDelete"))
    assert (await _post_event(client, _thread_reply("Your code is 4711.", thread_ts, "EvRaceDelReply", ts=ts))).status_code == 200
    reply = await _relayed(client, "Your code is 4711.")
    # Slack lets no bot delete a DM message of its own here: blanked, as any deletion of a relayed reply is.
    blanked = await wait_until(lambda: [c.params for c in slack.calls_to("chat.update") if c.params.get("channel") == "DRACEDEL"])
    assert [(b["ts"], b["text"]) for b in blanked] == [(reply.provider_ids[0], "—")]

    async def taken_back() -> bool:  # stored once the customer's copy changed, after that call
        async with client.services.sessions() as session:
            return ((await session.get(Message, reply.id)).meta or {}).get("deleted_by_operator") is True

    await wait_until(taken_back, what="the stored reply marked deleted_by_operator")
    async with client.services.sessions() as session:
        relayed = (await session.execute(select(Message).where(
            Message.direction == "in", Message.text == "Your code is 4711.").order_by(Message.id))).scalars().first()
    assert relayed.status == "done"  # it was relayed; the deletion is a message of its own, passed on after it
    assert not _told(slack, thread_ts)


def _changed_without_user(thread_ts: str, ts: str, event_id: str, subtype: str = "message_changed", **message) -> bytes:
    """Slack's `message_changed` (or `message_deleted`) in the thread of a message no member wrote (an
    integration's post: no `user`, no `bot_id`), with `message` (or `previous_message`) as given."""
    event = {"type": "message", "subtype": subtype, "channel": OPS_CHANNEL, "hidden": True, "ts": f"{time.time():.6f}"}
    embedded = {"type": "message", "ts": ts, "thread_ts": thread_ts, **message}
    event |= {"deleted_ts": ts, "previous_message": embedded} if subtype == "message_deleted" else {"message": embedded}
    return _event(event, event_id)


async def test_a_change_of_a_message_without_a_user_is_not_answered_in_the_thread(client, slack):
    """A `message_changed` whose message has no `user` (Slack unfurling an integration's link: the message it
    embeds has none, and no `previous_message` need come) or a deletion of such a post was stored as a revision
    by nobody, and the thread got the public "Not sent to the customer: send it again, please."."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DNOUSER")
    await _post_event(client, _thread_reply("We are on it.", thread_ts, "EvNoUserBefore"))  # the thread's conversation
    await _relayed(client, "We are on it.")
    posted = f"{time.time():.6f}"
    link = "Incident opened: <https://status.example.com/1>"
    unfurled = _changed_without_user(thread_ts, posted, "EvNoUserUnfurl", text=link,
                                     attachments=[{"from_url": "https://status.example.com/1", "title": "Incident 1"}])
    changed = _changed_without_user(thread_ts, posted, "EvNoUserChange", text="Incident resolved",
                                    edited={"ts": f"{time.time():.6f}"})
    deleted = _changed_without_user(thread_ts, posted, "EvNoUserDelete", "message_deleted", text="Incident resolved")
    for body in (unfurled, changed, deleted):
        assert (await _post_event(client, body)).status_code == 200
    # The thread's messages are handled in order: once the operator's next reply is relayed, the three were too.
    await _post_event(client, _thread_reply("Fixed on our side.", thread_ts, "EvNoUserAfter"))
    await _relayed(client, "Fixed on our side.")
    in_thread = [c.params["text"] for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == thread_ts]
    assert not [text for text in in_thread if "Not sent to the customer" in text]
    assert not _told(slack, thread_ts)


async def test_slacks_retry_of_a_deletion_made_while_the_reply_was_relayed_is_passed_on_once(client, slack, monkeypatch):
    """The deletion applied to the waiting message left no stored event, so Slack's retry of it (its first
    delivery answered late, `X-Slack-Retry-Num`) was stored as a deletion of its own and passed on again: a
    second change of the customer's message (on Telegram, a refused delete the operator is told failed)."""
    _, thread_ts = await _escalated_and_claimed(client, slack, "DRETRYDEL")
    ts = f"{time.time():.6f}"
    deleted = _revision("message_deleted", thread_ts, ts, "Your PIN is 1234.", "EvRetryDelete")
    _revised_while_relayed(client, monkeypatch, deleted)
    assert (await _post_event(client, _thread_reply("Your PIN is 1234.", thread_ts, "EvRetryDelReply", ts=ts))).status_code == 200
    await wait_until(lambda: [c for c in slack.calls_to("chat.update") if c.params.get("channel") == "DRETRYDEL"])
    await _retried(client, deleted)
    # The thread's messages are handled in order: once the next reply is relayed, the retry was handled too.
    assert (await _post_event(client, _thread_reply("Anything else?", thread_ts, "EvRetryDelNext"))).status_code == 200
    await _relayed(client, "Anything else?")
    assert len([c for c in slack.calls_to("chat.update") if c.params.get("channel") == "DRETRYDEL"]) == 1
    assert not _told(slack, thread_ts)


async def test_an_operators_edit_whose_message_slack_sent_without_its_user_reaches_the_customer(client, slack):
    # c6a0072 kept such an edit (its previous_message names the member), but read its sender from the message
    # alone: blank, the relay took it for a change of a post no member wrote, and the customer kept the first text.
    _, thread_ts = await _escalated_and_claimed(client, slack, "DMEMBERLESS")
    ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply("Desk opens at 8.", thread_ts, "EvNoUserReply", ts=ts))).status_code == 200
    [customer_ts] = (await _relayed(client, "Desk opens at 8.")).provider_ids
    event = json.loads(_revision("message_changed", thread_ts, ts, "Desk opens at 8.", "EvNoUserEdit", new_text="Desk opens at 7."))
    del event["event"]["message"]["user"]
    assert (await _post_event(client, _event(event["event"], "EvNoUserEdit"))).status_code == 200
    update = await wait_until(lambda: [c.params for c in slack.calls_to("chat.update") if c.params.get("channel") == "DMEMBERLESS"])
    assert update[0]["ts"] == customer_ts and update[0]["text"] == "Desk opens at 7."
