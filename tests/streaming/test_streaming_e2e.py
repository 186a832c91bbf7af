"""Streaming by edits through the real app: signed webhook → worker → slowly streaming model → edits at the
fake Telegram Bot API, fake Slack Web API and fake Discord → the final, verified reply edited into place, sent once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select

from channels.discord_followups import Interactions
from gateway.app import create_app
from gateway.delivery import outbox as outbox_module
from gateway.delivery.streaming import EditStreamer
from gateway.settings import load_settings
from storage.models import Conversation, Message
from tests.channels.discord_helpers import SIGNING_KEY, ask_interaction, signed
from tests.conftest import upgrade, write_config
from tests.fakes.discord_api import APPLICATION_ID, FakeDiscord
from tests.fakes.openai_server import Turn
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, FakeSlack, sign
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.gateway_channels.conftest import (
    FALLBACK,
    QUESTION,
    bot_config,
    deliveries,
    messages_in_chat,
    settled_chat,
    wait_until,
)
from tests.streaming.conftest import SlowStreamOpenAI, numbered_words, shown_twice, telegram_timeline, words

pytestmark = pytest.mark.asyncio(loop_scope="module")

TG_TOKEN = "723738643:AAH-fake-token_for-tests"
TG_SECRET = "s3cret-Token_value"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
INTERVAL = 0.2
# Cited early: tokens are held until the text cites an extract, then go out a sentence at a time
# (gateway/pipeline/held_stream.py); each sentence takes longer to stream than INTERVAL.
ANSWER = ("The Plus plan costs $6 per month [1] or $60 per year. It is meant for individuals who work "
          "alone [1]. Teams of three or more people pick the Team plan instead [1].")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def discord_fake():
    fake = await FakeDiscord().start()
    yield fake
    await fake.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory, discord_fake):
    tmp_path = tmp_path_factory.mktemp("streaming")
    llm = SlowStreamOpenAI(word_delay=0.04).start()
    slack = await FakeSlack.start()
    patch = pytest.MonkeyPatch()
    patch.setattr(EditStreamer, "INTERVALS", {"telegram": INTERVAL, "slack": INTERVAL, "discord": INTERVAL})
    try:
        async with FakeTelegramAPI(TG_TOKEN) as telegram:
            channels = {"telegram": {"token": "${STREAM_TG_TOKEN}", "webhook_secret": "${STREAM_TG_SECRET}",
                                     "api_base": telegram.base_url, "stream": True},
                        "slack": {"bot_token": "${STREAM_SLACK_TOKEN}", "signing_secret": "${STREAM_SLACK_SECRET}",
                                  "api_base": slack.api_base, "stream": True},
                        "discord": {"token": "${STREAM_DISCORD_TOKEN}", "api_base": discord_fake.api_base,
                                    "public_key": SIGNING_KEY.verify_key.encode().hex(), "stream": True}}
            bot = bot_config(tmp_path, channels) | {"model": "streamer"}
            models = [{"model_name": "streamer", "litellm_params": {
                "model": "openai/streamer", "api_base": llm.base_url, "api_key": "${STREAM_LLM_KEY:-sk-fake}"}}]
            for key, value in {"STREAM_TG_TOKEN": TG_TOKEN, "STREAM_TG_SECRET": TG_SECRET,
                               "STREAM_SLACK_TOKEN": BOT_TOKEN, "STREAM_SLACK_SECRET": SLACK_SECRET,
                               "STREAM_DISCORD_TOKEN": discord_fake.token}.items():
                patch.setenv(key, value)
            settings = load_settings(write_config(tmp_path, bots=[bot], models=models,
                                                  llm={"timeout": 20, "num_retries": 0}))
            await asyncio.to_thread(upgrade, settings.database_url)
            app = create_app(settings, start_scheduler=False, start_channels=False)
            async with app.router.lifespan_context(app):
                services = app.state.services
                await services.knowledge.ingest()
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60) as client:
                    yield client, services, llm, telegram, slack
    finally:
        patch.undo()
        await slack.stop()
        llm.stop()


async def post_telegram(client, update_id: int, chat: int, text: str, *, message_id: int = 42):
    body = {"update_id": update_id, "message": {
        "message_id": message_id, "date": 1700000000, "chat": {"id": chat, "type": "private"},
        "from": {"id": 5550001, "is_bot": False, "first_name": "Ann"}, "text": text}}
    response = await client.post("/webhooks/acme/telegram", content=json.dumps(body).encode(),
                                  headers={"content-type": "application/json",
                                           "X-Telegram-Bot-Api-Secret-Token": TG_SECRET})
    assert response.status_code == 200


def tg_calls(fake: FakeTelegramAPI, chat: int, method: str | None = None) -> list[Any]:
    methods = {method.lower()} if method else {"sendmessage", "editmessagetext"}
    return [c for c in fake.requests if c.method.lower() in methods and str(c.params.get("chat_id")) == str(chat)]


async def test_telegram_stream_sends_once_edits_at_the_interval_and_ends_with_the_verified_reply(env):
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER))
    await post_telegram(client, 7001, 3001, QUESTION, message_id=91)
    stored = await settled_chat(services, channel="telegram", chat="3001")
    inbound, reply = stored
    assert (inbound.status, reply.status) == ("done", "sent")
    calls = tg_calls(telegram, 3001)
    assert [c.method.lower() for c in calls].count("sendmessage") == 1  # the outbox sent nothing extra
    assert calls[0].method.lower() == "sendmessage" and calls[0].params["reply_parameters"]["message_id"] == 91
    assert len(calls) >= 3 and all(c.method.lower() == "editmessagetext" for c in calls[1:])
    assert all(b.at - a.at >= INTERVAL for a, b in zip(calls, calls[1:]))
    [message] = [m for m in telegram.sent if m.chat_id == 3001]
    # The final edit shows the gate-2-verified reply (citation renumbered) with its sources.
    assert message.text.startswith(reply.text) and "Sources:" in message.text and reply.citations
    assert len(message.edits) == len(calls) - 1
    assert [d.provider_id for d in await deliveries(services, reply.id)] == [str(message.message_id)]



async def test_telegram_stream_of_a_burst_quotes_the_piece_sent_first(env):
    """A question typed in two pieces whose webhooks were stored in the other order ("cost?" before "How much
    does the Plus plan"): the streamed answer's first message quotes the piece sent first, as a reply sent
    whole does (test_burst.py), not the one the worker took up, whose message the stream was started on."""
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER))
    await post_telegram(client, 7011, 3011, "cost?", message_id=94)
    await post_telegram(client, 7010, 3011, "How much does the Plus plan", message_id=93)
    stored = await settled_chat(services, channel="telegram", chat="3011", count=3)
    [first_sent] = [m for m in stored if m.meta.get("platform_message_id") == "93"]
    [reply] = [m for m in stored if m.direction == "out"]
    calls = tg_calls(telegram, 3011)
    assert calls[0].method.lower() == "sendmessage" and len(calls) >= 2  # streamed: sent once, then edited
    assert [c.params["reply_parameters"]["message_id"] for c in calls if c.method.lower() == "sendmessage"] == [93]
    assert reply.reply_to_id == first_sent.id and reply.status == "sent"

async def test_telegram_long_stream_rolls_over_and_never_shows_text_twice(env):
    client, services, llm, telegram, _ = env
    tokens = numbered_words(900)
    llm.word_delay = 0.002
    try:
        llm.script("streamer", Turn(text="".join(tokens) + " [1]"))
        await post_telegram(client, 7002, 3002, QUESTION)
        inbound, reply = await settled_chat(services, channel="telegram", chat="3002")
    finally:
        llm.word_delay = 0.04
    assert reply.status == "sent" and words(reply.text) == words("".join(tokens))
    messages = [m for m in telegram.sent if m.chat_id == 3002]
    assert len(messages) == 2 and len(tg_calls(telegram, 3002, "sendMessage")) == 2
    assert [w for m in messages for w in words(m.text)] == words("".join(tokens))
    assert "Sources:" in messages[-1].text
    timeline = telegram_timeline(telegram, 3002)
    assert [shown_twice(state) for state in timeline if shown_twice(state)] == []
    assert [d.provider_id for d in await deliveries(services, reply.id)] == [str(m.message_id) for m in messages]


async def test_telegram_greeting_without_tokens_is_sent_normally(env):
    client, services, llm, telegram, _ = env
    body = {"update_id": 7003, "message": {
        "message_id": 5, "date": 1700000000, "chat": {"id": 3003, "type": "private"},
        "from": {"id": 5550001, "is_bot": False, "first_name": "Ann"}, "text": "/start",
        "entities": [{"type": "bot_command", "offset": 0, "length": 6}]}}
    await client.post("/webhooks/acme/telegram", content=json.dumps(body).encode(),
                      headers={"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET})
    _, reply = await settled_chat(services, channel="telegram", chat="3003")
    assert reply.status == "sent"
    assert [c.method.lower() for c in tg_calls(telegram, 3003)] == ["sendmessage"]


async def test_slack_stream_posts_once_then_updates_into_the_final_reply(env):
    client, services, llm, _, slack = env
    llm.script("streamer", Turn(text=ANSWER))
    body = {"token": "legacy", "team_id": "T111", "api_app_id": "A111", "type": "event_callback",
            "event_id": "EvStream1", "event_time": 1700000001,
            "authorizations": [{"team_id": "T111", "user_id": BOT_USER_ID, "is_bot": True}],
            "event": {"type": "message", "channel": "D0STREAM", "channel_type": "im", "user": "U0CUSTOMER",
                      "text": QUESTION, "ts": "1700000001.000100", "team": "T111"}}
    raw = json.dumps(body).encode()
    response = await client.post("/webhooks/acme/slack/events", content=raw,
                                 headers={"content-type": "application/json", **sign(raw, secret=SLACK_SECRET)})
    assert response.status_code == 200
    _, reply = await settled_chat(services, channel="slack", chat="D0STREAM")
    posts = [c for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == "D0STREAM"]
    updates = [c for c in slack.calls_to("chat.update") if c.params.get("channel") == "D0STREAM"]
    assert len(posts) == 1 and len(updates) >= 1
    ts = posts[0].params["_ts"]
    assert all(u.params["ts"] == ts for u in updates)
    assert "*Sources:*" in updates[-1].params["text"] and "$6 per month" in updates[-1].params["text"]
    assert reply.status == "sent"
    assert [d.provider_id for d in await deliveries(services, reply.id)] == [ts]


async def test_discord_ask_streams_as_follow_ups_edited_through_the_interaction(env, discord_fake):
    client, services, llm, _, _ = env
    llm.script("streamer", Turn(text=ANSWER))
    body = ask_interaction(QUESTION)
    raw = json.dumps(body).encode()
    response = await client.post("/webhooks/acme/discord/interactions", content=raw, headers=signed(raw).headers)
    assert response.status_code == 200 and response.json() == {"type": 5}
    _, reply = await settled_chat(services, channel="discord", chat=body["channel_id"])
    # The follow-up was edited at the channel's endpoint, which needs the bot to see the channel: the fake
    # answered 404, streaming stopped on the first words and the answer was recorded as unreachable.
    assert reply.status == "sent"
    (shown,) = [m for m in discord_fake.messages.values() if m.get("interaction_token") == body["token"]]
    assert "Sources:" in shown["content"] and "$6 per month" in shown["content"]
    assert discord_fake.received("PATCH", f"/webhooks/{APPLICATION_ID}/{body['token']}/messages/{shown['id']}")
    assert [d.provider_id for d in await deliveries(services, reply.id)] == [shown["id"]]


async def test_telegram_text_failing_gate_2_is_never_streamed_and_the_fallback_is_sent_once(env):
    """It used to be shown word by word (two messages long) and then replaced by the fallback."""
    client, services, llm, telegram, _ = env
    llm.word_delay = 0.002
    try:
        llm.script("streamer", Turn(text="".join(numbered_words(900))))  # long, and cites nothing
        await post_telegram(client, 7004, 3004, QUESTION)
        _, reply = await settled_chat(services, channel="telegram", chat="3004")
    finally:
        llm.word_delay = 0.04
    assert reply.status == "sent" and reply.text == FALLBACK
    [only] = [m for m in telegram.sent if m.chat_id == 3004]
    assert only.text == FALLBACK and only.edits == []
    assert [d.provider_id for d in await deliveries(services, reply.id)] == [str(only.message_id)]


async def test_telegram_operator_takeover_mid_stream_deletes_the_draft(env):
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER + " " + ANSWER))
    await post_telegram(client, 7005, 3005, QUESTION)
    [draft] = await wait_until(lambda: [m for m in telegram.sent if m.chat_id == 3005], what="the streamed draft")
    async with services.sessions() as session, session.begin():
        conversation = (await session.execute(select(Conversation).where(
            Conversation.channel == "telegram", Conversation.chat == "3005"))).scalar_one()
        conversation.state = "operator"  # a person took the thread while the model was still writing
    [inbound] = await wait_until(
        lambda: _done(services, "3005"), what="the question marked done without a reply")
    assert inbound.direction == "in"
    await wait_until(lambda: draft.deleted, what="the draft deleted")
    assert len([m for m in telegram.sent if m.chat_id == 3005]) == 1


async def _done(services, chat: str):
    found = await messages_in_chat(services, channel="telegram", chat=chat)
    return found if found and all(m.status == "done" for m in found) else None


async def test_telegram_stream_cut_by_a_crash_is_removed_when_the_question_is_answered_again(env):
    """The worker dies mid-stream (its tasks cancelled, as at a kill): the partial message stays in the
    chat and the question stays pending. The next attempt deletes the partial before answering, so
    the customer is not left with a cut-off message beside the full answer."""
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER + " " + ANSWER + " " + ANSWER), Turn(text=ANSWER))
    await post_telegram(client, 7006, 3006, QUESTION)
    [partial] = await wait_until(lambda: [m for m in telegram.sent if m.chat_id == 3006], what="the streamed partial")
    await services.worker.stop(timeout=0)  # the process dies here
    try:
        [inbound] = await messages_in_chat(services, channel="telegram", chat="3006")
        assert inbound.status == "pending" and inbound.meta["streamed"] == [str(partial.message_id)]
    finally:
        await services.worker.start()
    inbound, reply = await settled_chat(services, channel="telegram", chat="3006")
    assert (inbound.status, reply.status) == ("done", "sent") and inbound.meta["streamed"] != [str(partial.message_id)]
    assert partial.deleted
    answers = [m for m in telegram.sent if m.chat_id == 3006 and not m.deleted]
    assert len(answers) == 1 and "$6 per month" in answers[0].text


async def test_a_reply_sent_whole_after_a_crash_removes_what_was_streamed_for_it(env):
    """The process died after storing the reply and before editing the stream into it: the inbound is
    done and the reply pending, so the outbox sends it whole after restart. The streamed message must
    not stay beside it."""
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER))
    await post_telegram(client, 7007, 3007, QUESTION)
    inbound, reply = await settled_chat(services, channel="telegram", chat="3007")
    [streamed] = [m for m in telegram.sent if m.chat_id == 3007]
    assert inbound.meta["streamed"] == [str(streamed.message_id)]
    # The state such a crash leaves: the reply stored but not sent, the stream as it was.
    async with services.sessions() as session, session.begin():
        row = await session.get(Message, reply.id)
        row.status, row.provider_ids = "pending", []
    services.worker.notify()
    inbound, reply = await settled_chat(services, channel="telegram", chat="3007")
    assert reply.status == "sent" and inbound.meta["streamed"] == []
    assert streamed.deleted
    answers = [m for m in telegram.sent if m.chat_id == 3007 and not m.deleted]
    assert len(answers) == 1 and "$6 per month" in answers[0].text


async def test_removing_what_was_streamed_keeps_a_change_of_the_questions_meta_made_meanwhile(env, monkeypatch):
    """Sent whole after a crash, the reply's streamed leftovers were removed and the question's `meta` written back
    whole as the outbox had read it before the removal's calls to the platform: a change committed meanwhile (the
    chat moved, its quote dropped, `storage.chat_moves`) was undone."""
    client, services, llm, telegram, _ = env
    llm.script("streamer", Turn(text=ANSWER))
    await post_telegram(client, 7008, 3008, QUESTION)
    inbound, reply = await settled_chat(services, channel="telegram", chat="3008")
    async with services.sessions() as session, session.begin():
        row = await session.get(Message, reply.id)
        row.status, row.provider_ids = "pending", []
    remove = outbox_module.remove_leftovers

    async def removed_while_the_chat_moved(*args, **kwargs):
        await remove(*args, **kwargs)
        async with services.sessions() as session, session.begin():
            row = await session.get(Message, inbound.id)
            row.meta = {**row.meta, "moved_from_chat": "3008"}

    monkeypatch.setattr(outbox_module, "remove_leftovers", removed_while_the_chat_moved)
    services.worker.notify()
    inbound, reply = await settled_chat(services, channel="telegram", chat="3008")
    assert reply.status == "sent" and inbound.meta["streamed"] == []
    assert inbound.meta["moved_from_chat"] == "3008"


async def test_a_discord_ask_stream_cut_by_a_crash_is_blanked_through_its_interaction(env, discord_fake):
    """The worker dies while an `/ask` answer streams as a follow-up, and the process that takes the question
    up again never saw the interaction. The cut-off follow-up must be blanked through the interaction's token,
    as the stream edited it: the channel's own endpoint needs the bot to see the channel, which an app added
    for its commands alone does not (Discord: 403 Missing Access), and the partial stayed beside the answer."""
    client, services, llm, _, _ = env
    llm.script("streamer", Turn(text=ANSWER + " " + ANSWER + " " + ANSWER), Turn(text=ANSWER))
    body = ask_interaction(QUESTION) | {"id": "1400000000000000777", "token": "tok-crash-777",
                                        "channel_id": "1300000000000000777"}
    raw = json.dumps(body).encode()
    response = await client.post("/webhooks/acme/discord/interactions", content=raw, headers=signed(raw).headers)
    assert response.status_code == 200 and response.json() == {"type": 5}
    [partial] = await wait_until(lambda: [m for m in discord_fake.messages.values()
                                          if m.get("interaction_token") == body["token"]], what="the streamed partial")
    await services.worker.stop(timeout=0)  # the process dies here
    adapter = services.adapters[("acme", "discord")]
    saved = adapter._interactions
    try:
        adapter._interactions = Interactions()  # the next process holds no interaction in memory
        discord_fake.fail_next("PATCH", f"/channels/{body['channel_id']}/messages/{partial['id']}", status=403,
                               body={"message": "Missing Access", "code": 50001}, times=5)
        await services.worker.start()
        _, reply = await settled_chat(services, channel="discord", chat=body["channel_id"])
    finally:
        adapter._interactions = saved
    assert reply.status == "sent"
    assert discord_fake.messages[partial["id"]]["content"] == "—"  # blanked, not left cut off beside the answer
    answers = [m for m in discord_fake.messages.values()
               if m.get("interaction_token") == body["token"] and m["id"] != partial["id"]]
    assert len(answers) == 1 and "$6 per month" in answers[0]["content"]
