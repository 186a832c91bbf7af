"""Discord through the real app: Ed25519-signed interactions (PING, /ask) and gateway messages."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
from discord.utils import time_snowflake
from nacl.signing import SigningKey
from structlog.testing import capture_logs

from channels.discord import DiscordAdapter, classify_gateway_message
from channels.discord_followups import Interactions
from channels.discord_parse import revision_of
from gateway.models import member_thread, utcnow
from storage.models import Conversation
from tests.english_replies import TEXT_ONLY_REPLY
from tests.fakes.discord_api import APPLICATION_ID, BOT_USER_ID, INTERACTION_CHANNEL_ID, FakeDiscord, message_object
from tests.gateway_channels.conftest import (
    QUESTION,
    count_messages,
    gateway_app,
    messages_in_chat,
    settle,
    settled_chat,
    store_reply,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

SIGNING_KEY = SigningKey(bytes(range(32)))
USA_ASK = "Usa /ask, por favor."
URL = "/webhooks/acme/discord/interactions"


@asynccontextmanager
async def discord_gateway(tmp_path, **kwargs: Any) -> AsyncIterator[tuple[Any, Any, FakeDiscord]]:
    """(client, services, fake): the real app whose Discord channel is on a fake Discord."""
    fake = await FakeDiscord().start()
    channels = {"discord": {"token": "${DISCORD_TOKEN}", "public_key": SIGNING_KEY.verify_key.encode().hex(),
                            "api_base": fake.api_base, "gateway_url": fake.gateway_url}}
    try:
        async with gateway_app(tmp_path, channels=channels, env={"DISCORD_TOKEN": fake.token},
                               bot={"replies": {"use_ask": USA_ASK}}, **kwargs) as app:
            yield (*app, fake)
    finally:
        await fake.close()


@asynccontextmanager
async def reading(services) -> AsyncIterator[DiscordAdapter]:
    """A Discord connection of acme's own (an adapter starts once), ready, reading into the app, which answers
    over REST."""
    reader = DiscordAdapter("acme", services.adapters[("acme", "discord")].settings)
    await reader.start(services._deliver_for("acme"))
    try:
        await asyncio.wait_for(reader.client.wait_until_ready(), timeout=10)
        yield reader
    finally:
        await reader.stop()


async def answered_once_on_edit(services, fake: FakeDiscord, channel: str, edited: dict) -> tuple[dict, list]:
    """`edited` comes twice (MESSAGE_UPDATE): one answer in `channel`, a price. (The answer, the settled chat.)"""
    for _ in range(2):
        await fake.dispatch("MESSAGE_UPDATE", edited)
    [reply] = await wait_until(lambda: fake.channel_messages(channel), what="the answer to the edit")
    chat = await settled_chat(services, channel="discord", chat=channel)
    await settle(services=services)
    assert "$" in reply["content"] and len(fake.channel_messages(channel)) == 1
    return reply, chat


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with discord_gateway(tmp_path_factory.mktemp("discord")) as env_:
        yield env_


async def post(client, body: dict[str, Any], *, key: SigningKey = SIGNING_KEY, timestamp: int | None = None,
               signed: bool = True):
    raw = json.dumps(body).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {"content-type": "application/json"}
    if signed:
        headers.update({"X-Signature-Ed25519": key.sign(ts.encode() + raw).signature.hex(),
                        "X-Signature-Timestamp": ts})
    return await client.post(URL, content=raw, headers=headers)


def ask(interaction_id: str, question: str = QUESTION, *, channel: str = "1300000000000000001") -> dict[str, Any]:
    return {"id": interaction_id, "application_id": APPLICATION_ID, "type": 2, "token": f"tok-{interaction_id}",
            "version": 1, "guild_id": "1300000000000000000", "channel_id": channel,
            "member": {"user": {"id": "1300000000000000099", "username": "ann", "global_name": "Ann"}},
            "data": {"id": "1300000000000000050", "name": "ask", "type": 1,
                     "options": [{"name": "question", "type": 3, "value": question}]}}


def followups(fake: FakeDiscord, interaction_id: str) -> list[dict[str, Any]]:
    return [m for m in fake.channel_messages(INTERACTION_CHANNEL_ID)
            if m.get("interaction_token") == f"tok-{interaction_id}"]


async def test_discord_ping_gets_pong(env):
    client, _, _ = env
    response = await post(client, {"id": "1", "application_id": APPLICATION_ID, "type": 1, "token": "t", "version": 1})
    assert response.status_code == 200 and response.json() == {"type": 1}


async def test_discord_other_slash_command_is_answered_in_the_bots_words(env):
    """Another command of the app (/help) was answered "Please use /ask." whatever the bot's language."""
    client, _, _ = env
    body = {**ask("1400000000000000009"), "data": {"id": "1300000000000000051", "name": "help", "type": 1}}
    response = await post(client, body)
    assert response.status_code == 200
    assert response.json() == {"type": 4, "data": {"content": USA_ASK, "flags": 64, "allowed_mentions": {"parse": []}}}


async def test_discord_ask_is_deferred_then_answered_once_by_followup(env):
    client, services, fake = env
    response = await post(client, ask("1400000000000000001"))
    assert response.status_code == 200 and response.json() == {"type": 5}
    [reply] = await wait_until(lambda: followups(fake, "1400000000000000001"), what="the follow-up")
    assert "$" in reply["content"] and "Sources:" in reply["content"]
    stored = await settled_chat(services, channel="discord", chat="1300000000000000001")
    assert [(m.direction, m.status) for m in stored][-2:] == [("in", "done"), ("out", "sent")]
    # Stored with the question, for its answer after a restart (tests/channels/test_discord_interaction_restart.py).
    assert stored[0].meta["interaction"]["token"] == "tok-1400000000000000001"


async def test_discord_ask_answered_by_a_process_that_never_saw_it_goes_to_its_followups(env):
    """The /ask's token lived in memory only: after a restart its answer went to the channel, where a bot
    added for its commands alone cannot post, instead of ending the "thinking…" state."""
    client, services, fake = env
    channel = "1300000000000000007"
    await post(client, ask("1400000000000000007", channel=channel))
    await wait_until(lambda: followups(fake, "1400000000000000007"), what="the follow-up")
    question, _ = await settled_chat(services, channel="discord", chat=channel)
    services.adapters[("acme", "discord")]._interactions = Interactions()  # a new process: nothing in memory
    reply_id = await store_reply(services, conversation_id=question.conversation_id, text="And on Sundays: closed.",
                                 author="bot", reply_to_id=question.id)
    assert await services.outbox.deliver(reply_id) == "sent"
    assert [m["content"] for m in followups(fake, "1400000000000000007")][1:] == ["And on Sundays: closed."]
    assert fake.channel_messages(channel) == []


async def test_discord_duplicate_and_concurrent_interactions_reply_once(env):
    client, services, fake = env
    body = ask("1400000000000000002", channel="1300000000000000002")
    results = await asyncio.gather(*(post(client, body) for _ in range(4)))
    assert all(r.status_code == 200 for r in results)
    await wait_until(lambda: followups(fake, "1400000000000000002"), what="the follow-up")
    await settle(services=services)
    assert len(followups(fake, "1400000000000000002")) == 1
    stored = await settled_chat(services, channel="discord", chat="1300000000000000002")
    assert [m.direction for m in stored] == ["in", "out"]


async def test_discord_ask_while_a_person_holds_the_thread_gets_a_notice_not_thinking_forever(env):
    """A deferred /ask shows "thinking…" until a follow-up, and fails after 15 minutes: while the thread
    waits for a person, the bot must not answer it, but the interaction still gets one notice."""
    client, services, fake = env
    channel = "1300000000000000007"
    await post(client, ask("1400000000000000071", "I want to talk to a human", channel=channel))
    [handoff] = await wait_until(lambda: followups(fake, "1400000000000000071"), what="the handoff reply")
    await post(client, ask("1400000000000000072", "What does E-SYNC-409 mean?", channel=channel))
    [notice] = await wait_until(lambda: followups(fake, "1400000000000000072"), what="the holding notice")
    assert notice["content"] == "I've asked a person from our team to take over. They'll reply here shortly."
    stored = await settled_chat(services, channel="discord", chat=channel)
    assert [(m.direction, m.author) for m in stored][-2:] == [("in", "contact"), ("out", "system")]
    assert not any("E-SYNC-409" in m.text for m in stored if m.direction == "out")  # the bot did not answer it


@pytest.mark.parametrize("case", ["wrong-key", "stale", "unsigned"])
async def test_discord_bad_stale_or_missing_signature_is_401_and_stores_nothing(env, case):
    client, services, fake = env
    before = await count_messages(services, channel="discord")
    kwargs = {"wrong-key": {"key": SigningKey(bytes(32))}, "stale": {"timestamp": int(time.time()) - 3600},
              "unsigned": {"signed": False}}[case]
    response = await post(client, ask("1400000000000000003", channel="1300000000000000003"), **kwargs)
    assert response.status_code == 401
    await settle(0.3, services=services)
    assert await count_messages(services, channel="discord") == before
    assert followups(fake, "1400000000000000003") == []


def gateway_message(message_id: str, channel: str, content: str, *, guild: str | None = None,
                    author: str = "1300000000000000077") -> dict[str, Any]:
    payload = {"id": message_id, "type": 0, "channel_id": channel, "content": content, "flags": 0,
               "timestamp": "2026-11-29T10:00:00+00:00", "mentions": [], "attachments": [],
               "author": {"id": author, "username": f"u{author[-2:]}", "global_name": "Bob", "bot": False}}
    if guild:
        payload["guild_id"] = guild
    return payload


async def test_discord_gateway_dm_is_answered_as_a_reply_with_typing(env):
    client, services, fake = env
    deliver = services._deliver_for("acme")  # what the gateway client calls for each MESSAGE_CREATE
    inbound = classify_gateway_message(gateway_message("1500000000000000001", "1600000000000000001", QUESTION),
                                       bot_user_id=BOT_USER_ID)
    await deliver(inbound)
    await deliver(inbound)  # a gateway replay after a RESUME: deduplicated by message id
    [reply] = await wait_until(lambda: fake.channel_messages("1600000000000000001"), what="the reply")
    assert str(reply["message_reference"]["message_id"]) == "1500000000000000001"  # (a) replies to the question
    assert fake.received("POST", "/channels/1600000000000000001/typing")
    await settle(services=services)
    assert len(fake.channel_messages("1600000000000000001")) == 1


async def test_discord_guild_message_without_mention_is_ignored(env):
    client, services, fake = env
    message = classify_gateway_message(gateway_message("1500000000000000002", "1600000000000000002",
                                                       "what does it cost?", guild="1700000000000000001"),
                                       bot_user_id=BOT_USER_ID)
    assert message.only_while_held  # nobody talks with this member: the inbox stores nothing
    assert await services.inbox.accept("acme", message) is None


async def test_discord_one_members_escalation_in_a_shared_channel_does_not_hold_the_others(env):
    """#help is shared: Ann asks for a person, and Bob, asking in the same channel, still gets his answer.
    The operator's reply to Ann goes to the channel addressed to her."""
    client, services, fake = env
    deliver = services._deliver_for("acme")
    channel, guild, ann, bob = "1600000000000000009", "1700000000000000009", "1300000000000000091", "1300000000000000092"

    def asked(message_id: str, text: str, author: str):
        payload = gateway_message(message_id, channel, f"<@{BOT_USER_ID}> {text}", guild=guild, author=author)
        payload["mentions"] = [{"id": BOT_USER_ID}]
        return classify_gateway_message(payload, bot_user_id=BOT_USER_ID)

    await deliver(asked("1500000000000000091", "I want to talk to a human", ann))
    await wait_until(lambda: fake.channel_messages(channel), what="Ann's handoff reply")
    await deliver(asked("1500000000000000092", QUESTION, bob))
    answer = await wait_until(lambda: [m for m in fake.channel_messages(channel)
                                       if str((m.get("message_reference") or {}).get("message_id")) ==
                                       "1500000000000000092"], what="Bob's answer")
    assert "$" in answer[0]["content"]  # answered by the bot, not held for Ann's operator
    stored = await settled_chat(services, channel="discord", chat=channel, count=4)
    by_conversation: dict[int, list[str]] = {}
    for message in stored:
        by_conversation.setdefault(message.conversation_id, []).append(message.text)
    assert len(by_conversation) == 2  # one conversation per member

    ann_conversation = stored[0].conversation_id
    reply_id = await store_reply(services, conversation_id=ann_conversation, text="Hi Ann, Sam here.")
    assert await services.outbox.deliver(reply_id) == "sent"
    operator = fake.channel_messages(channel)[-1]
    assert operator["content"] == f"<@{ann}> Hi Ann, Sam here."

    # Ann answers the operator in the channel without mentioning the bot: hers is a held conversation,
    # so it is stored for the operator (it was ignored by the group rule). Bob's chatter is not.
    def plain(message_id: str, text: str, author: str):
        return classify_gateway_message(gateway_message(message_id, channel, text, guild=guild, author=author),
                                        bot_user_id=BOT_USER_ID)

    await deliver(plain("1500000000000000093", "it is ann@example.com", ann))
    await deliver(plain("1500000000000000094", "lunch anyone?", bob))
    texts = [m.text for m in await messages_in_chat(services, channel="discord", chat=channel)]
    assert "it is ann@example.com" in texts and "lunch anyone?" not in texts


async def test_discord_long_reply_is_split_at_2000_without_repeats(env):
    client, services, fake = env
    deliver = services._deliver_for("acme")
    await deliver(classify_gateway_message(gateway_message("1500000000000000003", "1600000000000000003", QUESTION),
                                           bot_user_id=BOT_USER_ID))
    await wait_until(lambda: fake.channel_messages("1600000000000000003"), what="the first answer")
    conversation_id = (await settled_chat(services, channel="discord", chat="1600000000000000003"))[0].conversation_id
    text = "\n\n".join(f"Note {i}: " + "notes sync across every device you own. " * 6 for i in range(14))
    reply_id = await store_reply(services, conversation_id=conversation_id, text=text, citations=[
        {"source": "help", "title": "Plans and pricing", "url": "https://help.example.com/plans"}])
    assert await services.outbox.deliver(reply_id) == "sent"
    parts = fake.channel_messages("1600000000000000003")[1:]
    assert len(parts) >= 2 and all(len(p["content"]) <= 2000 for p in parts)
    joined = "\n".join(p["content"] for p in parts)
    assert all(joined.count(f"Note {i}:") == 1 for i in range(14))
    assert "https://help.example.com/plans" in joined


async def test_discord_message_edited_or_deleted_before_its_answer(env):
    """Edited while it waited: answered as edited. Deleted: not answered at all."""
    client, services, fake = env
    deliver = services._deliver_for("acme")
    for message_id, channel, revised in (("1500000000000000031", "1600000000000000031", {"content": QUESTION}),
                                         ("1500000000000000032", "1600000000000000032", None)):
        payload = gateway_message(message_id, channel, "How much?")
        await deliver(classify_gateway_message(payload, bot_user_id=BOT_USER_ID))
        data = None if revised is None else {**payload, **revised}
        await deliver(revision_of(int(message_id), int(channel), data, event="MESSAGE_UPDATE", bot_user_id=BOT_USER_ID))
    [reply] = await wait_until(lambda: fake.channel_messages("1600000000000000031"), what="the reply")
    assert "$" in reply["content"]
    [taken_back] = await settled_chat(services, channel="discord", chat="1600000000000000032", count=1)
    assert taken_back.status == "ignored"
    await settle(services=services)
    assert fake.channel_messages("1600000000000000032") == []


ONLY_MEDIA = {  # channel -> a DM's content besides its empty text, and the attachment kind it is stored as
    "1600000000000000041": ({"attachments": [{"id": "1800000000000000001", "filename": "receipt.png", "size": 2048,
                                              "url": "https://cdn.discordapp.com/attachments/1/2/receipt.png",
                                              "proxy_url": "https://media.discordapp.net/attachments/1/2/receipt.png",
                                              "content_type": "image/png"}]}, "image"),
    "1600000000000000042": ({"sticker_items": [{"id": "749054660769218631", "name": "Wumpus Wave",
                                                "format_type": 3}]}, "sticker"),
    # Content of a kind the gateway does not read: it was taken for an empty message and greeted.
    "1600000000000000043": ({"poll": {"question": {"text": "Which plan?"}, "expiry": "2026-11-30T10:00:00+00:00",
                                      "allow_multiselect": False, "layout_type": 1,
                                      "answers": [{"answer_id": 1, "poll_media": {"text": "Plus"}}]}}, "other"),
}


async def test_discord_dm_of_only_an_attachment_or_sticker_gets_the_text_only_reply(env):
    """As a photo or a sticker alone on Telegram, WhatsApp or Slack: through discord.py's own reading of the
    MESSAGE_CREATE, the customer is told only text is read (not greeted, not left without an answer)."""
    client, services, fake = env
    async with reading(services):
        for channel, (content, _) in ONLY_MEDIA.items():
            await fake.dispatch("MESSAGE_CREATE", message_object(
                message_id=str(int(channel) - 100000000000000), channel_id=channel, content="",
                author={"id": "1300000000000000077", "username": "bob", "discriminator": "0", "avatar": None},
                timestamp="2026-11-29T10:00:00+00:00", **content))
        replies = [await wait_until(lambda c=c: fake.channel_messages(c), what="the reply") for c in ONLY_MEDIA]
    assert [r["content"] for [r] in replies] == [TEXT_ONLY_REPLY] * len(ONLY_MEDIA)
    for channel, (_, kind) in ONLY_MEDIA.items():
        [question, _] = await settled_chat(services, channel="discord", chat=channel)
        assert question.text == "" and [a["kind"] for a in question.attachments] == [kind]


async def test_discord_server_message_edited_to_mention_the_bot_is_answered_once(env):
    """A member who forgot the bot's @mention and edited it in (as on Telegram and Slack): the first version was
    ignored, never stored, and the edit was applied to nothing, so the question went unanswered."""
    client, services, fake = env
    channel, guild = "1600000000000000051", "1700000000000000051"
    member = {"id": "1300000000000000078", "username": "ann", "discriminator": "0", "avatar": None}
    asked = message_object(message_id="1500000000000000051", channel_id=channel, content=QUESTION, author=member,
                           timestamp="2026-11-29T10:00:00+00:00", guild_id=guild)
    edited = {**asked, "content": f"<@{BOT_USER_ID}> {QUESTION}", "edited_timestamp": "2026-11-29T10:00:09+00:00",
              "mentions": [{"id": BOT_USER_ID, "username": "acme", "discriminator": "0", "avatar": None, "bot": True}]}
    async with reading(services):
        with capture_logs() as logs:
            await fake.dispatch("MESSAGE_CREATE", asked)
            # Read and ignored before the edit comes: discord.py updates the message it handed on_message in place.
            await wait_until(lambda: any(e["event"] == "inbound.ignored" for e in logs), what="the question ignored")
        reply, [question, answer] = await answered_once_on_edit(services, fake, channel, edited)
    # It replies to the member's message, as any answer in a server channel (it named "edit-of:…", no message).
    assert str(reply["message_reference"]["message_id"]) == asked["id"] == question.meta["platform_message_id"]
    assert question.text == QUESTION and question.conversation_id == answer.conversation_id
    async with services.sessions() as session:
        conversation = await session.get(Conversation, question.conversation_id)
    assert (conversation.workspace, conversation.thread) == (guild, member_thread(member["id"]))


async def test_discord_dm_whose_store_failed_and_was_edited_is_answered_once_on_the_edit(env):
    """A DM whose store failed, then edited: its edit was ignored as one of a message already answered, and the
    question went unanswered, where a Telegram private chat's or a Slack DM's is answered (every DM is stored)."""
    client, services, fake = env
    channel, sent = "1600000000000000052", datetime.now(timezone.utc) - timedelta(minutes=1)
    member = {"id": "1300000000000000079", "username": "ned", "discriminator": "0", "avatar": None}
    edited = {**message_object(message_id=str(time_snowflake(sent)), channel_id=channel, content=QUESTION,
                               author=member, timestamp=sent.isoformat()), "edited_timestamp": utcnow().isoformat()}
    async with reading(services):  # no MESSAGE_CREATE stored: the edit is the first the inbox hears of it
        reply, [question, _] = await answered_once_on_edit(services, fake, channel, edited)
    assert question.text == QUESTION and question.meta["platform_message_id"] == edited["id"]


# Last: stopping the app's adapter closes the HTTP session its replies are sent with.
async def test_discord_gateway_connection_is_reported_by_readyz(env):
    client, services, fake = env
    adapter = services.adapters[("acme", "discord")]
    assert (await client.get("/readyz")).json()["connections"] == {"acme/discord": "not started"}
    await adapter.start(services._deliver_for("acme"))
    try:
        await fake.wait_identified()
        await asyncio.wait_for(adapter.client.wait_until_ready(), timeout=10)
        body = (await client.get("/readyz")).json()
    finally:
        await adapter.stop()
    assert body["status"] == "ready" and body["connections"] == {"acme/discord": "connected"}
