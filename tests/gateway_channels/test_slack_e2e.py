"""Slack through the real app: signed Events API deliveries → worker → fake Slack Web API."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
import structlog
import structlog.testing

from gateway.models import NEVER_STORED_EDIT_WINDOW
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, FakeSlack, sign
from tests.gateway_channels.conftest import (
    QUESTION,
    count_messages,
    deliveries,
    gateway_app,
    messages_in_chat,
    settle,
    settled_chat,
    store_reply,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
URL = "/webhooks/acme/slack/events"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    fake = await FakeSlack.start()
    channels = {"slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}",
                          "api_base": fake.api_base}}
    try:
        async with gateway_app(tmp_path_factory.mktemp("slack"), channels=channels,
                               env={"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET}) as app:
            yield (*app, fake)
    finally:
        await fake.stop()


def envelope(event_id: str, channel: str, text: str, *, kind: str = "message", ts: str = "1700000001.000100",
             channel_type: str = "im", **event: Any) -> dict[str, Any]:
    return {"token": "legacy", "team_id": "T111", "api_app_id": "A111", "type": "event_callback",
            "event_id": event_id, "event_time": 1700000001,
            "authorizations": [{"team_id": "T111", "user_id": BOT_USER_ID, "is_bot": True}],
            "event": {"type": kind, "channel": channel, "channel_type": channel_type, "user": "U0CUSTOMER",
                      "text": text, "ts": ts, "team": "T111", **event}}


async def post(client, body: dict[str, Any], *, secret: str = SIGNING_SECRET, timestamp: int | None = None,
               signed: bool = True, retry: int | None = None):
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    if signed:
        headers.update(sign(raw, secret=secret, timestamp=timestamp))
    if retry is not None:
        headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
    return await client.post(URL, content=raw, headers=headers)


def posted_to(fake: FakeSlack, channel: str) -> list[dict[str, Any]]:
    return [p for p in fake.posted() if p["channel"] == channel]


async def test_slack_url_verification_echoes_the_challenge(env):
    client, _, _ = env
    response = await post(client, {"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                                   "type": "url_verification"})
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


async def test_slack_dm_is_answered_once_with_sources(env):
    client, services, fake = env
    response = await post(client, envelope("Ev0001", "D0001", QUESTION))
    assert response.status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "D0001"), what="the reply at the fake Slack")
    assert "$" in reply["text"] and "*Sources:*" in reply["text"]
    assert reply.get("thread_ts") in (None, "")  # a top-level DM is answered at top level
    stored = await settled_chat(services, channel="slack", chat="D0001")
    assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "sent")]
    assert [d.provider_id for d in await deliveries(services, stored[1].id)] == [reply["ts"]]


async def test_slack_retries_and_concurrent_deliveries_reply_once(env):
    client, services, fake = env
    body = envelope("Ev0002", "D0002", QUESTION)
    results = await asyncio.gather(post(client, body), *(post(client, body, retry=n) for n in (1, 2, 3)))
    assert all(r.status_code == 200 for r in results)
    await wait_until(lambda: posted_to(fake, "D0002"), what="the reply")
    await settle(services=services)
    assert len(posted_to(fake, "D0002")) == 1
    assert [m.direction for m in await settled_chat(services, channel="slack", chat="D0002")] == ["in", "out"]


async def test_slack_retry_is_said_on_the_log_lines_of_its_delivery(env):
    """X-Slack-Retry-Num / -Reason reached `result.extra` and no log: an operator following a message could
    not see that Slack had sent it again."""
    client, services, _ = env
    body = envelope("Ev0017", "D0017", QUESTION)
    assert (await post(client, body)).status_code == 200
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        assert (await post(client, body, retry=2)).status_code == 200
    [duplicate] = [e for e in logs if e["event"] == "inbound.duplicate"]
    assert (duplicate["retry_num"], duplicate["retry_reason"]) == ("2", "http_timeout")
    await settle(services=services)
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        assert (await post(client, envelope("Ev0018", "D0018", QUESTION))).status_code == 200
    [stored] = [e for e in logs if e["event"] == "inbound.stored"]
    assert "retry_num" not in stored  # a first delivery says nothing of retries
    await settle(services=services)


@pytest.mark.parametrize("case", ["bad-secret", "stale", "unsigned"])
async def test_slack_bad_stale_or_missing_signature_is_401_and_stores_nothing(env, case):
    client, services, fake = env
    before = await count_messages(services, channel="slack")
    kwargs = {"bad-secret": {"secret": "not-the-secret"}, "stale": {"timestamp": int(time.time()) - 3600},
              "unsigned": {"signed": False}}[case]
    response = await post(client, envelope("Ev0003", "D0003", QUESTION), **kwargs)
    assert response.status_code == 401
    await settle(0.3, services=services)
    assert await count_messages(services, channel="slack") == before
    assert posted_to(fake, "D0003") == []


async def test_slack_signed_but_unusable_payload_is_400_that_slack_will_not_retry(env):
    client, services, _ = env
    before = await count_messages(services, channel="slack")
    response = await post(client, {"type": "event_callback", "event_id": "Ev0BAD", "event": {"type": "message",
                                   "channel": "D0BAD", "user": "U0CUSTOMER", "text": 12345, "ts": "1700000009.1"}})
    assert response.status_code == 400 and "payload" in response.json()["error"]
    # Slack retries every non-2xx three times unless told not to; a retry could not fix this.
    assert response.headers["X-Slack-No-Retry"] == "1"
    assert await count_messages(services, channel="slack") == before


@pytest.mark.parametrize("thread_ts", [{"ts": "1"}, ["1700000001.000100"], 1700000001.0001], ids=["dict", "list", "number"])
async def test_slack_signed_event_with_a_thread_ts_that_is_not_text_is_400(env, thread_ts):
    client, services, _ = env
    before = await count_messages(services, channel="slack")
    response = await post(client, envelope("Ev0BADTS", "D0BADTS", "hello", thread_ts=thread_ts))
    assert response.status_code == 400 and "thread" in response.json()["error"]
    assert await count_messages(services, channel="slack") == before


async def test_slack_non_ascii_signature_is_401_not_500(env):
    client, services, _ = env
    raw = json.dumps(envelope("Ev0NONASCII", "D0NONASCII", "hello")).encode()
    headers = {"content-type": "application/json", "X-Slack-Request-Timestamp": str(int(time.time())),
               "X-Slack-Signature": "v0=\u00e9"}
    response = await client.post(URL, content=raw, headers={k: v.encode("latin-1") for k, v in headers.items()})
    assert response.status_code == 401


async def test_slack_channel_message_without_mention_is_ignored(env):
    client, services, fake = env
    before = await count_messages(services, channel="slack")
    body = envelope("Ev0004", "C0004", "anyone know the price?", channel_type="channel")
    assert (await post(client, body)).status_code == 200
    await settle(services=services)
    assert await count_messages(services, channel="slack") == before
    assert posted_to(fake, "C0004") == []


async def test_slack_app_mention_is_answered_in_its_thread(env):
    client, services, fake = env
    body = envelope("Ev0005", "C0005", f"<@{BOT_USER_ID}> {QUESTION}", kind="app_mention", channel_type="channel",
                    ts="1700000005.000500")
    assert (await post(client, body)).status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "C0005"), what="the threaded reply")
    assert reply["thread_ts"] == "1700000005.000500"


async def test_slack_long_reply_is_split_with_mrkdwn_links(env):
    client, services, fake = env
    await post(client, envelope("Ev0006", "D0006", QUESTION))
    await wait_until(lambda: posted_to(fake, "D0006"), what="the first answer")
    conversation_id = (await settled_chat(services, channel="slack", chat="D0006"))[0].conversation_id
    text = "\n\n".join(f"Section {i}: " + "keep your workspace tidy and synced. " * 10 for i in range(16))
    reply_id = await store_reply(services, conversation_id=conversation_id, text=text, citations=[
        {"source": "help", "title": "Plans & pricing", "url": "https://help.example.com/plans"}])
    assert await services.outbox.deliver(reply_id) == "sent"
    parts = posted_to(fake, "D0006")[1:]
    assert len(parts) >= 2 and all(len(p["text"]) <= 3000 for p in parts)
    joined = "\n".join(p["text"] for p in parts)
    assert all(joined.count(f"Section {i}:") == 1 for i in range(16))
    assert "<https://help.example.com/plans|Plans &amp; pricing>" in joined


async def test_slack_follow_up_in_the_thread_the_bot_answered_is_answered_without_mention(env):
    client, services, fake = env
    question_ts = "1700000013.001300"
    mention = envelope("Ev0013", "C0013", f"<@{BOT_USER_ID}> {QUESTION}", kind="app_mention",
                       channel_type="channel", ts=question_ts)
    assert (await post(client, mention)).status_code == 200
    await wait_until(lambda: posted_to(fake, "C0013"), what="the threaded answer")
    # Slack names the thread's author as parent_user_id: the customer, whose question the bot answered under.
    follow_up = envelope("Ev0013b", "C0013", "and how many devices can I use?", channel_type="channel",
                         ts="1700000014.001400", thread_ts=question_ts, parent_user_id="U0CUSTOMER")
    assert (await post(client, follow_up)).status_code == 200
    stored = await settled_chat(services, channel="slack", chat="C0013", count=4)
    assert [(m.direction, m.text) for m in stored if m.direction == "in"][1] == ("in", "and how many devices can I use?")
    assert len({m.conversation_id for m in stored}) == 1
    second = (await wait_until(lambda: posted_to(fake, "C0013")[1:], what="the follow-up's answer"))[0]
    assert second["thread_ts"] == question_ts


async def test_slack_reply_in_a_thread_the_bot_was_never_asked_in_is_ignored(env):
    client, services, fake = env
    before = await count_messages(services, channel="slack")
    body = envelope("Ev0014", "C0014", "lunch at noon?", channel_type="channel", ts="1700000016.001600",
                    thread_ts="1700000015.001500", parent_user_id="U0OTHER")
    assert (await post(client, body)).status_code == 200
    await settle(services=services)
    assert await count_messages(services, channel="slack") == before
    assert posted_to(fake, "C0014") == []


def channel_mention(event_id: str, channel: str, ts: str, text: str, **event: Any) -> dict[str, Any]:
    """The `app_mention` of a channel message naming the bot."""
    return envelope(event_id, channel, f"<@{BOT_USER_ID}> {text}", kind="app_mention", channel_type="channel", ts=ts,
                    **event)


def edited_mention(event_id: str, channel: str, ts: str, text: str, **event: Any) -> dict[str, Any]:
    """The `app_mention` Slack sends again when a message naming the bot is edited: the same `ts`, a new
    `event_id`, and the `edited` mark (slackapi/bolt-js#960)."""
    return channel_mention(event_id, channel, ts, text, edited={"user": "U0CUSTOMER", "ts": str(float(ts) + 5)}, **event)


async def test_slack_mention_edited_after_its_answer_is_not_answered_again(env):
    """A member who fixed a typo in a question the bot had answered got a second answer: Slack sends the
    edited message as a new `app_mention`, under a new event id."""
    client, services, fake = env
    ts = "1700000401.000100"
    assert (await post(client, channel_mention("Ev0401", "C0401", ts, "How much is the Pro plan?"))).status_code == 200
    await wait_until(lambda: posted_to(fake, "C0401"), what="the answer")
    await settled_chat(services, channel="slack", chat="C0401", count=2)
    # Once the bot answered in the thread, the message is the thread's parent: Slack adds its thread_ts.
    assert (await post(client, edited_mention("Ev0402", "C0401", ts, QUESTION, thread_ts=ts))).status_code == 200
    await settle(services=services)
    assert len(posted_to(fake, "C0401")) == 1
    assert [m.direction for m in await messages_in_chat(services, channel="slack", chat="C0401")] == ["in", "out"]


async def test_slack_message_edited_to_mention_the_bot_is_answered_once(env):
    """A member who forgot the @mention and edited it in: the first version was ignored, the edit is the question."""
    client, services, fake = env
    ts = "1700000403.000100"
    plain = envelope("Ev0403", "C0403", QUESTION, channel_type="channel", ts=ts)
    assert (await post(client, plain)).status_code == 200
    edited = edited_mention("Ev0404", "C0403", ts, QUESTION)
    assert (await post(client, edited)).status_code == 200
    assert (await post(client, edited, retry=1)).status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "C0403"), what="the answer")
    assert reply["thread_ts"] == ts and "$" in reply["text"]
    stored = await settled_chat(services, channel="slack", chat="C0403", count=2)
    assert [m.direction for m in stored] == ["in", "out"]
    await settle(services=services)
    assert len(posted_to(fake, "C0403")) == 1


async def test_slack_mention_retried_after_its_edit_was_stored_is_answered_once(env):
    """The first delivery of a question failed and the member edited it meanwhile: the edited `app_mention`,
    its first version never stored, was stored as the question, and Slack's retry of the original (same `ts`,
    its own event id) was stored and answered too, on the text the member had already changed."""
    client, services, fake = env
    ts = "1700000405.000100"
    assert (await post(client, edited_mention("Ev0406", "C0405", ts, QUESTION))).status_code == 200
    assert (await post(client, channel_mention("Ev0405", "C0405", ts, "How much?"), retry=1)).status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "C0405"), what="the answer")
    assert reply["thread_ts"] == ts and "$" in reply["text"]
    await settle()
    stored = await settled_chat(services, channel="slack", chat="C0405", count=2)
    assert [(m.direction, m.text) for m in stored][:1] == [("in", QUESTION)] and len(stored) == 2
    assert len(posted_to(fake, "C0405")) == 1


def revision(event_id: str, channel: str, ts: str, text: str | None) -> dict[str, Any]:
    """Slack's `message_changed` (new `text`) or, with `text=None`, `message_deleted` of the DM at `ts`."""
    original = {"type": "message", "user": "U0CUSTOMER", "text": "How much?", "ts": ts, "team": "T111"}
    event = {"type": "message", "channel": channel, "channel_type": "im", "hidden": True, "ts": "1700000009.000900"}
    if text is None:
        event |= {"subtype": "message_deleted", "deleted_ts": ts, "previous_message": original}
    else:
        event |= {"subtype": "message_changed", "previous_message": original,
                  "message": {**original, "text": text, "edited": {"user": "U0CUSTOMER", "ts": "1700000009.0"}}}
    return {**envelope(event_id, channel, ""), "event": event}


async def test_slack_edit_or_deletion_of_a_waiting_message_changes_what_is_answered(env):
    """A customer who corrected or took back a message before its answer was answered on the old one."""
    client, services, fake = env
    ts = "1700000001.000200"
    await post(client, envelope("Ev0301", "D0301", "How much?", ts=ts))
    await post(client, revision("Ev0302", "D0301", ts, QUESTION))
    [reply] = await wait_until(lambda: posted_to(fake, "D0301"), what="the reply")
    assert "$" in reply["text"]
    await post(client, envelope("Ev0303", "D0302", QUESTION, ts=ts))
    await post(client, revision("Ev0304", "D0302", ts, None))
    [taken_back] = await settled_chat(services, channel="slack", chat="D0302", count=1)
    assert taken_back.status == "ignored" and "deleted" in taken_back.error
    await settle(services=services)
    assert posted_to(fake, "D0302") == []


async def test_slack_dm_question_retried_after_its_edit_is_answered_once_on_the_edit(env):
    """The first delivery of a DM failed and the customer edited it meanwhile: the `message_changed` was dropped
    as an edit of a message already answered, then Slack's retry of the original was stored and answered on the
    text the customer had replaced."""
    client, services, fake = env
    ts = f"{int(time.time()) - 120}.000100"
    for retry in (None, 1):  # the edit, and Slack's retry of it
        assert (await post(client, revision("Ev0502", "D0501", ts, QUESTION), retry=retry)).status_code == 200
    assert (await post(client, envelope("Ev0501", "D0501", "How much?", ts=ts), retry=1)).status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "D0501"), what="the answer")
    assert "$" in reply["text"]
    await settle()
    stored = await settled_chat(services, channel="slack", chat="D0501", count=2)
    assert [(m.direction, m.text) for m in stored][:1] == [("in", QUESTION)] and len(stored) == 2
    assert len(posted_to(fake, "D0501")) == 1


async def test_slack_edit_of_an_old_dm_or_of_a_channel_message_never_stored_is_not_answered(env):
    """A DM older than any retry (sent before the app was installed, or purged): its edit is no question of today;
    nor is a channel member's edit of a message that never named the bot."""
    client, services, fake = env
    before = await count_messages(services, channel="slack")
    old = f"{int(time.time() - (NEVER_STORED_EDIT_WINDOW + timedelta(minutes=5)).total_seconds())}.000100"
    assert (await post(client, revision("Ev0503", "D0503", old, QUESTION))).status_code == 200
    in_channel = revision("Ev0504", "C0504", f"{int(time.time()) - 60}.000100", QUESTION)
    in_channel["event"]["channel_type"] = "channel"
    assert (await post(client, in_channel)).status_code == 200
    await settle()
    assert posted_to(fake, "D0503") == posted_to(fake, "C0504") == []
    assert await count_messages(services, channel="slack") == before
