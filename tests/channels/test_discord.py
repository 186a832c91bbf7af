"""Discord adapter: real discord.py + PyNaCl against a local fake Discord (REST + gateway websocket)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from channels.base import RawRequest
from channels.discord import (
    MAX_LENGTH,
    DiscordAdapter,
    classify_gateway_message,
    parse_gateway_event,
    parse_gateway_message,
    to_discord_markdown,
)
from gateway.errors import BadRequest, ChannelSendError, RecipientUnreachable, SignatureInvalid
from gateway.models import Citation, ConversationRef, InboundMessage, OutboundMessage
from gateway.settings import DiscordChannel
from tests.fakes.discord_api import APPLICATION_ID, BOT_USER_ID, INTERACTION_CHANNEL_ID, FakeDiscord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "discord"
REACTON = "344487830824943618"  # the bot that fixture MessageCreate.Type19 replies to
CHANNEL = "900000000000000001"
GUILD = "900000000000000002"
SIGNING_KEY = SigningKey.generate()

# Every fixture, and what it must become. ("message", text) or ("ignored", reason fragment).
EXPECTED: dict[str, tuple[str, str]] = {
    "discord4j_discord_json/Hello.json": ("ignored", "control frame op 10"),
    "discord4j_discord_json/InteractionCreate.SubCommandGroup.json": ("ignored", "interactions endpoint"),
    "discord4j_discord_json/InteractionCreate.json": ("ignored", "interactions endpoint"),
    "discord4j_discord_json/MessageCreate.Type0.json": ("ignored", "neither mentions nor replies"),
    "discord4j_discord_json/MessageCreate.Type19.json": ("message", "cool."),
    "discord4j_discord_json/MessageCreate.Type6.json": ("ignored", "neither mentions nor replies"),
    "discord4j_discord_json/MessageDelete.json": ("ignored", "deletion"),
    "discord4j_discord_json/MessageReactionAdd.json": ("ignored", "reaction"),
    "discord4j_discord_json/MessageUpdate.Embeds.json": ("ignored", "message edit"),
    "discord4j_discord_json/MessageUpdate.NoEmbeds.json": ("ignored", "message edit"),
    "discord4j_discord_json/rest_Message.Reply.json": ("message", "cool."),
    "discord_api_docs/gateway_event_payload_envelope.json": ("ignored", "GATEWAY_EVENT_NAME is not a message"),
    "discord_api_docs/gateway_hello.json": ("ignored", "control frame op 10"),
    "discord_api_docs/gateway_invalid_session.json": ("ignored", "control frame op 9"),
    "discord_api_docs/gateway_reconnect.json": ("ignored", "control frame op 7"),
    "discord_api_docs/interaction_application_command_message_context_menu.json": ("ignored", "not /ask"),
    "discord_api_docs/interaction_application_command_slash_chat_input.json": ("ignored", "cardsearch"),
    "discord_api_docs/interaction_application_command_user_context_menu.json": ("ignored", "not /ask"),
    "discord_api_docs/interaction_autocomplete_partial.json": ("ignored", "autocomplete"),
    "discord_api_docs/message_object_example.json": ("message", "Supa Hot"),
    "discord_api_docs/message_object_example_crossposted.json": ("ignored", "crossposted"),
    "discord_interactions_js/interaction_application_command_minimal.json": ("ignored", "(test) is not /ask"),
    "discord_interactions_js/interaction_autocomplete_minimal.json": ("ignored", "autocomplete"),
    "discord_interactions_js/interaction_message_component_button_minimal.json": ("ignored", "type 3 (test)"),
    "discord_interactions_js/interaction_ping.json": ("ignored", "PING"),
}
FIXTURE_FILES = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json"))


def signed(body: bytes, *, timestamp: int | None = None, key: SigningKey = SIGNING_KEY) -> RawRequest:
    """A request signed exactly as Discord signs interactions: Ed25519 over timestamp + body."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = key.sign(ts.encode() + body).signature.hex()
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": ts, "content-type": "application/json"}
    return RawRequest(url="http://gw/webhooks/b/discord/interactions", headers=headers, query={}, body=body)


def settings_for(fake: FakeDiscord | None = None, **extra: Any) -> DiscordChannel:
    return DiscordChannel(
        token="fake-bot-token",
        public_key=SIGNING_KEY.verify_key.encode().hex(),
        api_base=fake.api_base if fake else None,
        gateway_url=fake.gateway_url if fake else None,
        **extra,
    )


def guild_message(content: str, *, message_id: str = "900000000000000010", **extra: Any) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": 0,
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "content": content,
        "author": {"id": "900000000000000003", "username": "alice", "discriminator": "0", "avatar": None},
        "attachments": [],
        "embeds": [],
        "mentions": [],
        "mention_roles": [],
        "pinned": False,
        "mention_everyone": False,
        "tts": False,
        "timestamp": "2026-11-29T10:00:00+00:00",
        "edited_timestamp": None,
        "flags": 0,
        **extra,
    }


@pytest.fixture
async def fake():
    server = await FakeDiscord().start()
    yield server
    await server.close()


@pytest.fixture
async def adapter(fake: FakeDiscord):
    instance = DiscordAdapter("support", settings_for(fake))
    yield instance
    await instance.stop()


# ---- fixtures from the shared corpus -----------------------------------------------------------------


def test_fixtures_all_have_an_expectation():
    assert FIXTURE_FILES and set(FIXTURE_FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_parse_fixture_is_normalized_or_ignored_with_reason(name: str):
    payload = json.loads((FIXTURES / name).read_text())
    adapter = DiscordAdapter("support", settings_for())
    if "op" in payload:  # a gateway frame
        result = parse_gateway_event(payload, bot_user_id=REACTON)
    elif "author" in payload:  # a bare message object (REST shape)
        result = parse_gateway_event({"op": 0, "t": "MESSAGE_CREATE", "d": payload}, bot_user_id=REACTON)
    else:  # an HTTP interaction, signed for real
        request = signed(json.dumps(payload).encode())
        adapter.verify(request)
        result = adapter.parse(request)
        assert result.response is not None and json.loads(result.response.body)["type"] in (1, 4, 5, 8)
    kind, detail = EXPECTED[name]
    if kind == "message":
        assert len(result.messages) == 1 and not result.ignored
        message = result.messages[0]
        assert message.text == detail and message.channel == "discord"
        assert message.external_id == str((payload.get("d") or payload)["id"])
        assert message.conversation.chat == str((payload.get("d") or payload)["channel_id"])
    else:
        assert not result.messages
        assert len(result.ignored) == 1 and detail in result.ignored[0]


def test_parse_fixture_reply_to_bot_keeps_reference_and_guild():
    payload = json.loads((FIXTURES / "discord4j_discord_json/MessageCreate.Type19.json").read_text())["d"]
    message = parse_gateway_message(payload, bot_user_id=REACTON)
    assert message is not None
    assert message.reply_to == "775214933398782002"
    assert message.conversation.workspace == "185949590652977152"
    assert message.sender.external_id == "134127815531560960" and not message.sender.is_bot
    assert message.sent_at.year == 2020


# ---- group behaviour, bots, media ------------------------------------------------------------------------


def test_parse_gateway_message_mention_answered_and_stripped():
    payload = guild_message(f"<@{BOT_USER_ID}> how do I reset?", mentions=[{"id": BOT_USER_ID}])
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.text == "how do I reset?"
    assert message.conversation == ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL)


def test_parse_gateway_message_guild_always_answers_when_configured():
    payload = guild_message("no mention here")
    assert parse_gateway_message(payload, bot_user_id=BOT_USER_ID) is None
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID, respond_in_groups="always")
    assert message is not None and message.text == "no mention here"


def test_parse_gateway_message_dm_answered_without_mention():
    payload = guild_message("hello")
    del payload["guild_id"]
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.conversation.workspace == ""


def test_parse_gateway_message_own_and_other_bots_ignored_with_reason():
    own = guild_message("hi", author={"id": BOT_USER_ID, "username": "me", "bot": True})
    other = guild_message(f"<@{BOT_USER_ID}>", author={"id": "5", "username": "other", "bot": True})
    assert classify_gateway_message(own, bot_user_id=BOT_USER_ID) == "own message"
    assert "another bot" in classify_gateway_message(other, bot_user_id=BOT_USER_ID)


def test_parse_gateway_message_media_without_text_yields_attachment():
    attachment = {"id": "77", "filename": "a.png", "content_type": "image/png", "url": "https://cdn.example/a.png"}
    payload = guild_message(f"<@{BOT_USER_ID}>", mentions=[{"id": BOT_USER_ID}], attachments=[attachment])
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.text == ""
    assert message.attachments[0].kind == "image"
    assert message.attachments[0].url == "https://cdn.example/a.png" and message.attachments[0].file_id == "77"


def test_parse_gateway_message_caption_used_as_text():
    attachment = {"id": "78", "filename": "r.pdf", "content_type": "application/pdf"}
    attachment["url"] = "https://cdn.example/r.pdf"
    payload = guild_message(f"<@{BOT_USER_ID}> what is this?", mentions=[{"id": BOT_USER_ID}], attachments=[attachment])
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.text == "what is this?"
    assert message.attachments[0].kind == "document" and message.attachments[0].caption == "what is this?"


# ---- interactions endpoint ----------------------------------------------------------------------------


def ask_interaction(question: str) -> dict[str, Any]:
    body = json.loads((FIXTURES / "discord_api_docs/interaction_application_command_slash_chat_input.json").read_text())
    option = {"type": 3, "name": "question", "value": question}
    body["data"] = {"type": 1, "name": "ask", "id": "1", "options": [option]}
    body["application_id"] = APPLICATION_ID
    return body


def test_verify_bad_signature_raises():
    adapter = DiscordAdapter("support", settings_for())
    request = signed(b'{"type":1}', key=SigningKey.generate())
    with pytest.raises(SignatureInvalid):
        adapter.verify(request)


def test_verify_tampered_body_raises():
    adapter = DiscordAdapter("support", settings_for())
    request = signed(b'{"type":1}')
    with pytest.raises(SignatureInvalid):
        adapter.verify(RawRequest(request.url, request.headers, {}, b'{"type":2}'))


def test_verify_missing_signature_raises():
    adapter = DiscordAdapter("support", settings_for())
    with pytest.raises(SignatureInvalid):
        adapter.verify(RawRequest("http://gw/x", {}, {}, b'{"type":1}'))


def test_verify_stale_timestamp_raises():
    adapter = DiscordAdapter("support", settings_for())
    with pytest.raises(SignatureInvalid, match="stale"):
        adapter.verify(signed(b'{"type":1}', timestamp=int(time.time()) - 3600))


def test_verify_without_public_key_refuses():
    adapter = DiscordAdapter("support", DiscordChannel(token="fake-bot-token"))
    with pytest.raises(SignatureInvalid):
        adapter.verify(signed(b'{"type":1}'))


def test_parse_ping_answers_pong():
    adapter = DiscordAdapter("support", settings_for())
    result = adapter.parse(signed(b'{"type":1,"id":"1","token":"t","version":1}'))
    assert result.response is not None and json.loads(result.response.body) == {"type": 1}
    assert not result.messages


def test_parse_ask_defers_and_keeps_token_out_of_raw():
    adapter = DiscordAdapter("support", settings_for())
    result = adapter.parse(signed(json.dumps(ask_interaction("  Where is my order? ")).encode()))
    assert json.loads(result.response.body) == {"type": 5}
    (message,) = result.messages
    assert message.external_id == "786008729715212338" and message.text == "Where is my order?"
    assert message.conversation.chat == "645027906669510667" and message.sender.display_name == "Mason"
    assert "token" not in message.raw


def test_parse_garbage_body_is_bad_request():
    adapter = DiscordAdapter("support", settings_for())
    with pytest.raises(BadRequest):
        adapter.parse(signed(b"not json"))


async def test_send_ask_answer_goes_to_interaction_followup(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    ids = await adapter.send(
        OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id)
    )
    (followup,) = fake.received("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")
    assert followup.json["content"] == "9 to 5." and followup.json["allowed_mentions"]["parse"] == []
    assert ids == [fake.channel_messages(INTERACTION_CHANNEL_ID)[0]["id"]]
    assert not fake.received("POST", "/channels/645027906669510667/messages")


async def test_send_without_reply_to_still_resolves_pending_ask(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    await adapter.send(OutboundMessage(conversation=question.conversation, text="First answer."))
    await adapter.send(OutboundMessage(conversation=question.conversation, text="Second answer."))
    (followup,) = fake.received("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")
    assert followup.json["content"] == "First answer."
    (later,) = fake.received("POST", "/channels/645027906669510667/messages")  # answered once: back to the channel
    assert later.json["content"] == "Second answer."


# ---- sending --------------------------------------------------------------------------------------------


def conversation() -> ConversationRef:
    return ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL)


async def test_send_long_answer_split_at_limit(fake: FakeDiscord, adapter: DiscordAdapter):
    paragraphs = [f"Paragraph {i}: " + "word " * 60 for i in range(30)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    ids = await adapter.send(OutboundMessage(conversation=conversation(), text=text, reply_to="900000000000000010"))
    sent = fake.channel_messages(CHANNEL)
    assert len(sent) == len(ids) >= 5
    assert all(len(m["content"]) <= MAX_LENGTH for m in sent)
    assert all(m["content"].startswith("Paragraph") for m in sent)  # cut on paragraph boundaries
    assert "\n\n".join(m["content"] for m in sent) == text
    assert str(sent[0]["message_reference"]["message_id"]) == "900000000000000010"
    assert all("message_reference" not in m for m in sent[1:])


async def test_send_never_pings_everyone(fake: FakeDiscord, adapter: DiscordAdapter):
    await adapter.send(OutboundMessage(conversation=conversation(), text="Hey @everyone and @here"))
    (request,) = fake.received("POST", f"/channels/{CHANNEL}/messages")
    assert request.json["allowed_mentions"] == {"parse": []}
    assert request.json["content"] == "Hey @everyone and @here"


async def test_send_citations_rendered_as_links(fake: FakeDiscord, adapter: DiscordAdapter):
    citations = (
        Citation(source="docs/returns.md", title="Returns policy", url="https://shop.example/returns"),
        Citation(source="faq.md", title="FAQ"),
    )
    await adapter.send(OutboundMessage(conversation=conversation(), text="30 days [1].", citations=citations))
    (message,) = fake.channel_messages(CHANNEL)
    assert "[Returns policy](https://shop.example/returns)" in message["content"]
    assert "2. FAQ" in message["content"]
    assert message["flags"] & 4  # SUPPRESS_EMBEDS: no link previews under an answer


async def test_send_rate_limited_once_delivers_exactly_once(fake: FakeDiscord, adapter: DiscordAdapter):
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=0.05)
    ids = await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 2
    assert [m["id"] for m in fake.channel_messages(CHANNEL)] == ids and len(ids) == 1


async def test_send_long_rate_limit_surfaces_retry_after(fake: FakeDiscord, adapter: DiscordAdapter):
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=120.0)
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    assert info.value.retry_after == 120.0 and not info.value.permanent
    assert fake.channel_messages(CHANNEL) == []


async def test_send_retry_after_partial_failure_does_not_duplicate(fake: FakeDiscord, adapter: DiscordAdapter):
    text = "\n\n".join(f"Part {i}. " + "x" * 1500 for i in range(3))
    outbound = OutboundMessage(conversation=conversation(), text=text, reply_to="900000000000000010")
    busy = {"message": "Service Unavailable", "code": 0}
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=503, body=busy, after=1)  # chunk 2 fails once
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(outbound)
    assert not info.value.permanent and len(fake.channel_messages(CHANNEL)) == 1
    ids = await adapter.send(outbound)  # the worker retries the whole reply
    sent = fake.channel_messages(CHANNEL)
    assert [m["id"] for m in sent] == ids and len(ids) == 3  # chunk 1 deduplicated by its nonce
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 5


async def test_send_forbidden_is_recipient_unreachable(fake: FakeDiscord, adapter: DiscordAdapter):
    body = {"message": "Cannot send messages to this user", "code": 50007}
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=403, body=body)
    with pytest.raises(RecipientUnreachable, match="50007"):
        await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))


async def test_send_with_rejected_token_is_permanent_failure(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake).model_copy(update={"token": "wrong-token"}))
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    finally:
        await adapter.stop()
    assert info.value.permanent and fake.channel_messages(CHANNEL) == []


async def test_send_typing_posts_typing(fake: FakeDiscord, adapter: DiscordAdapter):
    await adapter.send_typing(conversation())
    assert len(fake.received("POST", f"/channels/{CHANNEL}/typing")) == 1


async def test_edit_replaces_content(fake: FakeDiscord, adapter: DiscordAdapter):
    (message_id,) = await adapter.send(OutboundMessage(conversation=conversation(), text="Draft"))
    await adapter.edit(conversation(), message_id, "Final answer")
    assert fake.messages[message_id]["content"] == "Final answer"
    (patch,) = fake.received("PATCH", f"/channels/{CHANNEL}/messages/{message_id}")
    assert patch.json["allowed_mentions"] == {"parse": []}


async def test_edit_over_limit_is_refused(adapter: DiscordAdapter):
    with pytest.raises(BadRequest):
        await adapter.edit(conversation(), "1", "x" * (MAX_LENGTH + 1))


async def test_send_thread_posts_into_thread(fake: FakeDiscord, adapter: DiscordAdapter):
    thread = ConversationRef(channel="discord", workspace=GUILD, chat="900000000000000077", thread="900000000000000077")
    await adapter.send(OutboundMessage(conversation=thread, text="In the thread"))
    assert len(fake.channel_messages("900000000000000077")) == 1


# ---- rendering ------------------------------------------------------------------------------------------


def test_to_discord_markdown_adapts_headings_and_images_but_not_code():
    text = "#### Steps\n![diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    assert to_discord_markdown(text) == (
        "**Steps**\n[diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    )


# ---- gateway ------------------------------------------------------------------------------------------


async def test_start_connects_gateway_with_message_content_intent_and_delivers(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake))
    delivered: list[InboundMessage] = []

    async def deliver(message: InboundMessage) -> None:
        delivered.append(message)

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        assert fake.identifies[0]["token"] == "fake-bot-token"
        assert fake.identifies[0]["intents"] & (1 << 15)  # MESSAGE_CONTENT
        await fake.dispatch("MESSAGE_CREATE", guild_message("not for me", message_id="900000000000000020"))
        mention = guild_message(
            f"<@{BOT_USER_ID}> opening hours?", message_id="900000000000000021", mentions=[{"id": BOT_USER_ID}]
        )
        await fake.dispatch("MESSAGE_CREATE", mention)
        async with asyncio.timeout(5):
            while not delivered:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert [m.external_id for m in delivered] == ["900000000000000021"]
        assert delivered[0].text == "opening hours?" and delivered[0].conversation.workspace == GUILD
    finally:
        await adapter.stop()
    assert adapter.client.is_closed()


async def test_on_message_fixture_payloads_via_parse_message_create(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    delivered: list[InboundMessage] = []

    async def deliver(message: InboundMessage) -> None:
        delivered.append(message)

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        names = ["MessageCreate.Type0.json", "MessageCreate.Type19.json", "MessageCreate.Type6.json"]
        for name in names:
            payload = json.loads((FIXTURES / "discord4j_discord_json" / name).read_text())["d"]
            adapter.client._connection.parse_message_create(payload)
        me = {"id": BOT_USER_ID, "username": "me", "bot": True, "discriminator": "0", "avatar": None}
        own = guild_message("echo", message_id="900000000000000030", author=me)
        adapter.client._connection.parse_message_create(own)
        async with asyncio.timeout(5):
            while len(delivered) < 3:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        await adapter.stop()
    assert [m.text for m in delivered] == [".ping", "cool.", "different message"]
    assert delivered[1].reply_to == "775214933398782002"
    assert {m.external_id for m in delivered} == {"732582724170285086", "779520963116400721", "123456789012345678"}
