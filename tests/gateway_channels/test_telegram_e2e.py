"""Telegram through the real app: signed webhook → inbox → worker → offline model → fake Bot API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from tests.english_replies import TEXT_ONLY_REPLY
from tests.fakes.telegram_api import FakeTelegramAPI, utf16_len
from tests.gateway_channels.conftest import (
    GREETING,
    QUESTION,
    count_messages,
    deliveries,
    gateway_app,
    get_message,
    messages_in_chat,
    metric,
    send_failures,
    settle,
    settled_chat,
    store_reply,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN = "723738643:AAH-fake-token_for-tests"
SECRET = "s3cret-Token_value"
URL = "/webhooks/acme/telegram"


@asynccontextmanager
async def telegram_gateway(tmp_path, **kwargs: Any) -> AsyncIterator[tuple[Any, Any, FakeTelegramAPI]]:
    """(client, services, fake): the real app whose Telegram channel is on a fake Bot API."""
    async with FakeTelegramAPI(TOKEN) as fake:
        channels = {"telegram": {"token": "${TG_TOKEN}", "webhook_secret": "${TG_SECRET}",
                                 "api_base": fake.base_url, "greeting": GREETING}}
        async with gateway_app(tmp_path, channels=channels, env={"TG_TOKEN": TOKEN, "TG_SECRET": SECRET},
                               **kwargs) as (client, services):
            yield client, services, fake


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram")) as env_:
        yield env_


def update(update_id: int, chat: int, text: str | None = None, *, chat_type: str = "private",
           message_id: int = 42, **extra: Any) -> dict[str, Any]:
    message = {"message_id": message_id, "date": 1700000000, "chat": {"id": chat, "type": chat_type},
               "from": {"id": 5550001, "is_bot": False, "first_name": "Ann"}, **extra}
    if text is not None:
        message["text"] = text
    return {"update_id": update_id, "message": message}


async def post(client, body: dict[str, Any], secret: str | None = SECRET):
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    return await client.post(URL, content=json.dumps(body).encode(), headers=headers)


def sent_to(fake: FakeTelegramAPI, chat: int):
    return [m for m in fake.sent if m.chat_id == chat]


async def test_telegram_replies_in_two_chats_with_the_same_message_id_are_each_sent_once(env):
    """Telegram numbers messages per chat: two chats' first replies both get id 1000, and recording
    the second must not fail (it left the row `sending`, and the reply was sent again)."""
    client, services, fake = env
    for update_id, chat in ((9701, 7001), (9702, 7002)):
        assert (await post(client, update(update_id, chat, QUESTION))).status_code == 200
    first = await wait_until(lambda: sent_to(fake, 7001), what="chat A's reply")
    second = await wait_until(lambda: sent_to(fake, 7002), what="chat B's reply")
    assert first[0].message_id == second[0].message_id == 1000
    for chat in ("7001", "7002"):
        stored = await settled_chat(services, channel="telegram", chat=chat)
        assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "sent")] and stored[1].attempts == 1
        assert [d.provider_id for d in await deliveries(services, stored[1].id)] == ["1000"]
    await settle(services=services)
    assert len(sent_to(fake, 7001)) == len(sent_to(fake, 7002)) == 1


async def test_telegram_question_is_answered_once_with_citation_typing_and_reply_to(env):
    client, services, fake = env
    response = await post(client, update(9001, 1001, QUESTION, message_id=77))
    assert response.status_code == 200 and response.json() == {"ok": True}
    [reply] = await wait_until(lambda: sent_to(fake, 1001), what="the reply at the fake Bot API")
    assert "$" in reply.text and "Sources:" in reply.text
    assert reply.reply_to == 77  # (a) the inbound message_id became reply_parameters
    typing = [c for c in fake.calls("sendChatAction") if str(c.params["chat_id"]) == "1001"]
    assert typing and typing[0].params["action"] == "typing"  # (e) shown while the answer was produced
    first_send = next(c for c in fake.calls("sendMessage") if str(c.params["chat_id"]) == "1001")
    assert typing[0].at <= first_send.at
    stored = await settled_chat(services, channel="telegram", chat="1001")
    assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "sent")]
    assert [d.provider_id for d in await deliveries(services, stored[1].id)] == [str(reply.message_id)]


async def test_telegram_duplicate_and_concurrent_deliveries_reply_once(env):
    client, services, fake = env
    body = update(9002, 1002, QUESTION)
    first = await post(client, body)
    again = await asyncio.gather(*(post(client, body) for _ in range(5)))
    assert first.status_code == 200 and all(r.status_code == 200 for r in again)
    await wait_until(lambda: sent_to(fake, 1002), what="the reply")
    await settle(services=services)
    assert len(sent_to(fake, 1002)) == 1
    stored = await settled_chat(services, channel="telegram", chat="1002")
    assert [m.direction for m in stored] == ["in", "out"]
    metrics = (await client.get("/metrics")).text
    assert 'gateway_duplicate_deliveries_total{bot="acme",channel="telegram"} 5.0' in metrics


@pytest.mark.parametrize("secret", ["wrong-secret", None, ""], ids=["bad", "missing", "empty"])
async def test_telegram_bad_or_missing_secret_is_401_and_stores_nothing(env, secret):
    client, services, fake = env
    before = await count_messages(services, channel="telegram")
    response = await post(client, update(9003, 1003, QUESTION), secret=secret)
    assert response.status_code == 401
    await settle(0.3, services=services)
    assert await count_messages(services, channel="telegram") == before
    assert sent_to(fake, 1003) == []


@pytest.mark.parametrize(("chat", "text", "payload"), [(1004, "/start", None), (1014, "/start order123", "order123")],
                         ids=["start", "deep-link"])
async def test_telegram_start_command_gets_the_configured_greeting(env, chat, text, payload):
    """A deep link (t.me/<bot>?start=order123) is a /start: greeted, its payload kept in the message's
    meta for an operator or a tool; it was stored as the customer's words "order123", which the model
    then read in the history as something they had said."""
    client, services, fake = env
    body = update(9004 + chat - 1004, chat, text, entities=[{"type": "bot_command", "offset": 0, "length": 6}])
    assert (await post(client, body)).status_code == 200
    [reply] = await wait_until(lambda: sent_to(fake, chat), what="the greeting")
    assert reply.text == GREETING
    asked = (await settled_chat(services, channel="telegram", chat=str(chat)))[0]
    assert asked.text == "" and asked.meta["command"] == "start" and asked.meta.get("start_payload") == payload


async def test_telegram_help_with_a_question_answers_the_question(env):
    """ "/help my order never arrived" was greeted and its words dropped: the customer's question went unread.
    The words are the question, answered as /ask's are; a bare /help is still greeted."""
    client, services, fake = env
    for update_id, chat, text in ((9024, 1024, "/help"), (9034, 1034, f"/help {QUESTION}")):
        body = update(update_id, chat, text, entities=[{"type": "bot_command", "offset": 0, "length": 5}])
        assert (await post(client, body)).status_code == 200
    [greeted] = await wait_until(lambda: sent_to(fake, 1024), what="the greeting")
    [answered] = await wait_until(lambda: sent_to(fake, 1034), what="the answer")
    assert greeted.text == GREETING and answered.text != GREETING and "$" in answered.text
    asked = (await settled_chat(services, channel="telegram", chat="1034"))[0]
    assert asked.text == QUESTION and "command" not in asked.meta


async def test_telegram_photo_without_caption_gets_text_only_reply(env):
    client, services, fake = env
    photo = [{"file_id": "AgAD-small", "file_unique_id": "u1", "width": 90, "height": 90},
             {"file_id": "AgAD-large", "file_unique_id": "u2", "width": 800, "height": 800}]
    assert (await post(client, update(9005, 1005, photo=photo))).status_code == 200
    [reply] = await wait_until(lambda: sent_to(fake, 1005), what="the text-only reply")
    assert reply.text == TEXT_ONLY_REPLY
    inbound = (await messages_in_chat(services, channel="telegram", chat="1005"))[0]
    assert inbound.attachments == [{"kind": "image", "file_id": "AgAD-large"}]


@pytest.mark.parametrize(("update_id", "chat", "emoji", "expected"), [
    (9061, 1061, "👍", "You're welcome! Ask me any time if you have another question."),
    (9062, 1062, "🤔", TEXT_ONLY_REPLY)], ids=["thumbs-up", "other"])
async def test_telegram_sticker_says_what_its_emoji_says(env, update_id, chat, emoji, expected):
    """A 👍 sticker after an answer is a thanks, as a 👍 typed is; it got "I can only read text"."""
    client, services, fake = env
    sticker = {"file_id": "CAACAgI-sticker", "file_unique_id": "s1", "width": 512, "height": 512, "emoji": emoji,
               "is_animated": False, "is_video": False, "type": "regular"}
    assert (await post(client, update(update_id, chat, sticker=sticker))).status_code == 200
    [reply] = await wait_until(lambda: sent_to(fake, chat), what="the reply to the sticker")
    assert reply.text == expected


async def test_telegram_group_message_without_mention_is_ignored_and_not_stored(env):
    client, services, fake = env
    before = await count_messages(services, channel="telegram")
    body = update(9006, -1001006, "does anyone know the price?", chat_type="supergroup")
    assert (await post(client, body)).status_code == 200
    await settle(services=services)
    assert await count_messages(services, channel="telegram") == before
    assert sent_to(fake, -1001006) == []


async def test_telegram_operator_reply_in_a_group_mentions_the_member_by_name(env):
    client, services, fake = env
    earlier = {"message_id": 70, "date": 1700000000, "chat": {"id": -1001011, "type": "supergroup"},
               "from": {"id": fake.bot_id, "is_bot": True, "first_name": "Support"}, "text": "Ask me anything."}
    body = update(9011, -1001011, QUESTION, chat_type="supergroup", message_id=77, reply_to_message=earlier)
    assert (await post(client, body)).status_code == 200
    (answer,) = await wait_until(lambda: sent_to(fake, -1001011), what="the bot's answer in the group")
    assert answer.reply_to == 77 and not any(e["type"] == "text_mention" for e in answer.entities)
    conversation_id = (await settled_chat(services, channel="telegram", chat="-1001011"))[0].conversation_id
    reply_id = await store_reply(services, conversation_id=conversation_id, text="Hi, Sam from support here.")
    assert await services.outbox.deliver(reply_id) == "sent"
    operator = sent_to(fake, -1001011)[1]
    # The group is shared: the member the reply is for is named, from their stored profile, and notified.
    assert operator.text == "Ann Hi, Sam from support here." and operator.reply_to is None
    assert operator.entities[0]["type"] == "text_mention" and operator.entities[0]["user"]["id"] == 5550001


@pytest.mark.parametrize(("stand_in", "sender_chat"), [
    ({"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"},
     {"id": -1001041, "type": "supergroup", "title": "Ann's shop"}),
    ({"id": 136817688, "is_bot": True, "first_name": "Channel", "username": "Channel_Bot"},
     {"id": -1009000, "type": "channel", "title": "Ann's channel"}),
], ids=["anonymous-admin", "member-as-channel"])
async def test_telegram_message_sent_on_behalf_of_a_chat_is_answered(env, stand_in, sender_chat):
    """An anonymous group admin, or a member posting as their channel: Telegram puts a stand-in bot in
    `from` and the real sender in `sender_chat`; it was ignored as "a message from another bot"."""
    client, services, fake = env
    update_id, chat = (9041, -1001041) if stand_in["username"] == "GroupAnonymousBot" else (9042, -1001042)
    body = update(update_id, chat, "/ask " + QUESTION, chat_type="supergroup", message_id=81,
                  entities=[{"type": "bot_command", "offset": 0, "length": 4}], sender_chat=sender_chat)
    body["message"]["from"] = stand_in
    assert (await post(client, body)).status_code == 200
    (answer,) = await wait_until(lambda: sent_to(fake, chat), what="the answer in the group")
    assert "$" in answer.text and answer.reply_to == 81


async def _conversation_in(client, services, fake, update_id: int, chat: int) -> int:
    """Open a conversation in `chat` (one answered question) and return its id."""
    await post(client, update(update_id, chat, QUESTION))
    await wait_until(lambda: sent_to(fake, chat), what="the first answer")
    fake.sent[:] = [m for m in fake.sent if m.chat_id != chat]
    return (await settled_chat(services, channel="telegram", chat=str(chat)))[0].conversation_id


async def test_telegram_long_reply_is_split_and_citations_are_links(env):
    client, services, fake = env
    conversation_id = await _conversation_in(client, services, fake, 9007, 1007)
    paragraphs = [f"Paragraph {i}: " + "the sync engine keeps your notes safe. " * 12 for i in range(20)]
    text = "\n\n".join(paragraphs)
    reply_id = await store_reply(services, conversation_id=conversation_id, text=text, citations=[
        {"source": "help", "title": "Plans & pricing", "url": "https://help.example.com/plans?a=1&b=2"}])
    assert await services.outbox.deliver(reply_id) == "sent"
    parts = sent_to(fake, 1007)
    assert len(parts) >= 2 and all(utf16_len(p.text) <= 4096 for p in parts)
    visible = "\n".join(p.text for p in parts)
    assert all(f"Paragraph {i}:" in visible for i in range(20))
    assert sum(visible.count(f"Paragraph {i}:") for i in range(20)) == 20  # nothing shown twice
    links = [e for p in parts for e in p.entities if e["type"] == "text_link"]
    assert links == [{"type": "text_link", "offset": links[0]["offset"], "length": len("Plans & pricing"),
                      "url": "https://help.example.com/plans?a=1&b=2"}]
    assert len(await deliveries(services, reply_id)) == len(parts)


async def test_telegram_rate_limited_send_is_retried_later_without_repeating_parts(env):
    client, services, fake = env
    conversation_id = await _conversation_in(client, services, fake, 9008, 1008)
    text = "\n\n".join(f"Part {i}: " + "words to fill the message. " * 20 for i in range(12))
    # The first part goes through; the second hits a 429 longer than the adapter waits in place.
    fake.fail_next("sendMessage", status=429, retry_after=60, skip=1)
    services.outbox.max_backoff_s = services.outbox.max_platform_wait_s = 0.3  # the platform asked for 60 s
    try:
        reply_id = await store_reply(services, conversation_id=conversation_id, text=text)
        assert await services.outbox.deliver(reply_id) == "retry"
        waiting = await get_message(services, reply_id)
        assert waiting.status == "pending" and "retrying" in waiting.error and waiting.meta["next_attempt_at"]
        services.worker.notify()
        await wait_until(lambda: _status_is(services, reply_id, "sent"), what="the retried send")
    finally:
        services.outbox.max_backoff_s, services.outbox.max_platform_wait_s = 300.0, 3600.0
    parts = sent_to(fake, 1008)
    assert len(parts) >= 2
    assert [p.text.split(":")[0] for p in parts].count("Part 0") == 1  # the delivered part was not repeated
    done = await get_message(services, reply_id)
    assert done.attempts == 2 and done.error is None
    assert len(await deliveries(services, reply_id)) == len(parts)


async def test_telegram_send_failing_every_attempt_is_marked_failed_and_counted(env):
    client, services, fake = env
    conversation_id = await _conversation_in(client, services, fake, 9009, 1009)
    failures_before = await send_failures(client, "telegram")
    # A platform failing (a rate limit is no failed attempt: it only delays the reply, test_faults_channel).
    fake.fail_next("sendMessage", status=502, html=True, times=40)  # more than the adapter retries in place
    services.outbox.max_backoff_s, services.outbox.max_platform_wait_s, services.outbox.max_attempts = 0.2, 0.2, 2
    try:
        reply_id = await store_reply(services, conversation_id=conversation_id, text="Your refund is on its way.")
        assert await services.outbox.deliver(reply_id) == "retry"
        services.worker.notify()
        await wait_until(lambda: _status_is(services, reply_id, "failed"), what="the reply to fail")
    finally:
        services.outbox.max_backoff_s, services.outbox.max_platform_wait_s, services.outbox.max_attempts = 300.0, 3600.0, 5
        fake._scripts["sendmessage"].clear()
    failed = await get_message(services, reply_id)
    assert failed.error.startswith("send failed after 2 attempts") and failed.attempts == 2
    assert sent_to(fake, 1009) == []
    assert await send_failures(client, "telegram") == failures_before + 1


async def test_telegram_outage_moves_the_send_metrics_at_its_first_failed_attempt(env):
    """A reply fails for good only after every attempt (about 13 minutes by default); until then an
    outage of the platform moved no metric at all: the inbound was done, the reply only waited."""
    client, services, fake = env
    conversation_id = await _conversation_in(client, services, fake, 9012, 1012)
    retries = 'gateway_send_retries_total{bot="acme",channel="telegram"}'
    retries_before = await metric(client, retries)
    fake.fail_next("sendMessage", status=502, html=True, times=20)  # more than the adapter retries in place
    reply_id = await store_reply(services, conversation_id=conversation_id, text="Your refund is on its way.")
    assert await services.outbox.deliver(reply_id) == "retry"
    fake._scripts["sendmessage"].clear()  # Telegram is back
    assert await metric(client, retries) == retries_before + 1
    assert await metric(client, "gateway_outbox_depth") >= 1
    services.worker.notify()
    await wait_until(lambda: _status_is(services, reply_id, "sent"), what="the retried reply to be sent")
    assert await metric(client, retries) == retries_before + 1


async def test_telegram_permanent_refusal_fails_at_once(env):
    client, services, fake = env
    conversation_id = await _conversation_in(client, services, fake, 9010, 1010)
    fake.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked by the user")
    reply_id = await store_reply(services, conversation_id=conversation_id, text="Are you still there?")
    assert await services.outbox.deliver(reply_id) == "failed"
    failed = await get_message(services, reply_id)
    assert failed.attempts == 1 and "recipient unreachable" in failed.error and "blocked" in failed.error


async def test_telegram_reply_to_a_topic_closed_meanwhile_fails_at_once_for_an_operator_to_see(env):
    """A forum topic closed after the question: the reply failed as "telegram refused the message", like any
    odd refusal. It fails at once, not retried nor posted in the general chat (where it would answer a
    question no one there asked), saying the topic is closed, in the error the console shows."""
    client, services, fake = env
    chat, topic = -1001050, {"message_thread_id": 77, "is_topic_message": True}
    await post(client, update(9050, chat, "/ask " + QUESTION, chat_type="supergroup", **topic,
                              entities=[{"type": "bot_command", "offset": 0, "length": 4}]))
    await wait_until(lambda: sent_to(fake, chat), what="the answer in the topic")
    conversation_id = (await settled_chat(services, channel="telegram", chat=str(chat)))[0].conversation_id
    fake.closed_topics.add((chat, 77))
    with capture_logs() as logs:
        reply_id = await store_reply(services, conversation_id=conversation_id, text="One more thing.")
        assert await services.outbox.deliver(reply_id) == "failed"
    failed = await get_message(services, reply_id)
    assert failed.attempts == 1 and "topic 77" in failed.error and "closed" in failed.error
    assert [(e["chat"], e["thread"]) for e in logs if e["event"] == "telegram.topic_closed"] == [(str(chat), 77)]
    assert len(sent_to(fake, chat)) == 1  # nothing posted outside the topic


async def _status_is(services, message_id: int, status: str) -> bool:
    return (await get_message(services, message_id)).status == status


def membership(update_id: int, chat: int, old: str, new: str) -> dict[str, Any]:
    """A `my_chat_member` update as Telegram sends it (ChatMemberUpdated): the bot's own status changed."""
    bot = {"id": int(TOKEN.split(":")[0]), "is_bot": True, "first_name": "Support", "username": "support_bot"}
    member = {"kicked": {"until_date": 0}}.get(new, {})
    return {"update_id": update_id, "my_chat_member": {
        "chat": {"id": chat, "title": "Acme customers", "type": "supergroup"},
        "from": {"id": 5550002, "is_bot": False, "first_name": "Admin"}, "date": 1700000100,
        "old_chat_member": {"user": bot, "status": old}, "new_chat_member": {"user": bot, "status": new, **member}}}


async def test_telegram_bot_removed_from_a_group_fails_its_replies_at_once_until_added_back(env):
    """Removed from a group, the bot heard nothing of it: each later reply there went out and got a 403."""
    client, services, fake = env
    chat = -1001020
    await post(client, update(9030, chat, "/ask " + QUESTION, chat_type="supergroup",
                              entities=[{"type": "bot_command", "offset": 0, "length": 4}]))
    await wait_until(lambda: sent_to(fake, chat), what="the answer in the group")
    conversation_id = (await settled_chat(services, channel="telegram", chat=str(chat)))[0].conversation_id
    with capture_logs() as logs:
        assert (await post(client, membership(9031, chat, "member", "kicked"))).status_code == 200
    assert [e["chat"] for e in logs if e["event"] == "telegram.removed_from_chat"] == [str(chat)]
    sends = len(fake.calls("sendMessage"))
    reply_id = await store_reply(services, conversation_id=conversation_id, text="Still there?")
    assert await services.outbox.deliver(reply_id) == "failed"
    failed = await get_message(services, reply_id)
    assert failed.attempts == 1 and "recipient unreachable" in failed.error and "removed" in failed.error
    assert len(fake.calls("sendMessage")) == sends  # refused here, not by a 403 from Telegram
    with capture_logs() as logs:
        assert (await post(client, membership(9032, chat, "left", "member"))).status_code == 200
    assert [e["chat"] for e in logs if e["event"] == "telegram.added_to_chat"] == [str(chat)]
    again = await store_reply(services, conversation_id=conversation_id, text="Back again.")
    assert await services.outbox.deliver(again) == "sent"
