"""Discord adapter: gateway messages and fixture payloads parsed, interactions verified and parsed."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import discord
import pytest
from nacl.signing import SigningKey

from channels.base import RawRequest
from channels.discord import DiscordAdapter, classify_gateway_message
from channels.discord_parse import parse_interaction, revision_of
from gateway.errors import BadRequest, SignatureInvalid
from gateway.models import NEVER_STORED_EDIT_WINDOW, ConversationRef, utcnow
from gateway.settings import DiscordChannel
from tests.channels.discord_helpers import (
    CHANNEL,
    FIXTURES,
    GUILD,
    ask_interaction,
    guild_message,
    parse_gateway_event,
    parse_gateway_message,
    settings_for,
    signed,
)
from tests.fakes.discord_api import BOT_USER_ID

REACTON = "344487830824943618"  # the bot that fixture MessageCreate.Type19 replies to

# Every fixture, and what it must become. ("message", text) or ("ignored", reason fragment).
EXPECTED: dict[str, tuple[str, str]] = {
    "discord4j_discord_json/Hello.json": ("ignored", "control frame op 10"),
    "discord4j_discord_json/InteractionCreate.SubCommandGroup.json": ("ignored", "interactions endpoint"),
    "discord4j_discord_json/InteractionCreate.json": ("ignored", "interactions endpoint"),
    "discord4j_discord_json/MessageCreate.Type0.json": ("held_only", "neither mentions nor replies"),
    "discord4j_discord_json/MessageCreate.Type19.json": ("message", "cool."),
    # Named for a pin (type 6), yet holds a type 0 message: an ordinary one (a real pin notice: below).
    "discord4j_discord_json/MessageCreate.Type6.json": ("held_only", "neither mentions nor replies"),
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
    if kind == "held_only":  # no mention: stored only while a person talks with this member (the inbox)
        assert len(result.messages) == 1 and result.messages[0].only_while_held and not result.ignored
    elif kind == "message":
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
    assert message.conversation == ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL,
                                                   thread="member:900000000000000003")


def test_each_member_of_a_server_channel_has_a_conversation_of_their_own():
    """A follow-up must not be read with another member's question, nor held by their escalation."""
    def asked_by(author_id: str, message_id: str):
        payload = guild_message(f"<@{BOT_USER_ID}> and the price?", message_id=message_id,
                                mentions=[{"id": BOT_USER_ID}], author={"id": author_id, "username": author_id})
        return parse_gateway_message(payload, bot_user_id=BOT_USER_ID).conversation

    alice, bob, alice_again = asked_by("900000000000000003", "1"), asked_by("900000000000000004", "2"), \
        asked_by("900000000000000003", "3")
    assert alice != bob and alice == alice_again
    assert {alice.chat, bob.chat} == {CHANNEL}  # both replies still go to the channel
    assert alice.member == "900000000000000003" and bob.member == "900000000000000004"


def test_a_thread_is_one_conversation_for_everyone_in_it():
    conversations = {
        parse_gateway_message(guild_message(f"<@{BOT_USER_ID}> hi", message_id=str(n), mentions=[{"id": BOT_USER_ID}],
                                            author={"id": author, "username": author}),
                              bot_user_id=BOT_USER_ID, in_thread=True).conversation
        for n, author in enumerate(("900000000000000003", "900000000000000004"))
    }
    assert conversations == {ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL, thread=CHANNEL)}
    assert next(iter(conversations)).member is None


def test_ask_is_in_the_members_conversation_and_in_a_threads_when_asked_in_one():
    body = ask_interaction("Hours?")
    user = body["member"]["user"]["id"]
    (question,) = parse_interaction(body).messages
    assert question.conversation.thread == f"member:{user}"
    body["channel"] = {**body.get("channel", {}), "id": body["channel_id"], "type": 11}  # a public thread
    (in_thread,) = parse_interaction(body).messages
    assert in_thread.conversation.thread == body["channel_id"] == in_thread.conversation.chat


def test_parse_gateway_message_guild_always_answers_when_configured():
    payload = guild_message("no mention here")
    assert parse_gateway_message(payload, bot_user_id=BOT_USER_ID).only_while_held  # for an operator, if any
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID, respond_in_groups="always")
    assert message is not None and message.text == "no mention here" and not message.only_while_held


def test_parse_gateway_message_dm_answered_without_mention():
    payload = guild_message("hello")
    del payload["guild_id"]
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.conversation.workspace == "" and message.conversation.thread == ""


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


@pytest.mark.parametrize("content", [{"poll": {"question": {"text": "Which plan?"}}},
                                     # a forward is read for its text and files: one of a poll has neither
                                     {"message_snapshots": [{"message": {"content": "",
                                                                         "poll": {"question": {"text": "Which?"}}}}]}])
def test_a_poll_or_a_forwarded_message_alone_is_something_sent_not_an_empty_message(content):
    """Greeted as an empty message, the customer was never told it could not be read."""
    payload = guild_message("", **content)
    del payload["guild_id"]
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.text == ""
    assert [(a.kind, a.caption) for a in message.attachments] == [("other", next(iter(content)))]


def test_parse_gateway_message_caption_used_as_text():
    attachment = {"id": "78", "filename": "r.pdf", "content_type": "application/pdf"}
    attachment["url"] = "https://cdn.example/r.pdf"
    payload = guild_message(f"<@{BOT_USER_ID}> what is this?", mentions=[{"id": BOT_USER_ID}], attachments=[attachment])
    message = parse_gateway_message(payload, bot_user_id=BOT_USER_ID)
    assert message is not None and message.text == "what is this?"
    assert message.attachments[0].kind == "document" and message.attachments[0].caption == "what is this?"


# ---- interactions endpoint ----------------------------------------------------------------------------


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


def test_verify_without_public_key_refuses_and_start_says_why(caplog):
    with caplog.at_level("WARNING", logger="channels.discord"):
        adapter = DiscordAdapter("support", DiscordChannel(token="fake-bot-token"))
    [said] = [r for r in caplog.records if r.getMessage() == "discord.public_key_missing"]  # an event, not a sentence
    assert "discord.public_key is not set" in said.note and said.bot == "support"
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


@pytest.mark.parametrize("value", [{"a": 1}, 42, None])
def test_parse_ask_whose_question_is_no_string_is_an_empty_question_not_its_repr(value):
    body = ask_interaction("unused")
    body["data"]["options"][0]["value"] = value
    (message,) = DiscordAdapter("support", settings_for()).parse(signed(json.dumps(body).encode())).messages
    assert message.text == ""  # the pipeline answers an empty question with the greeting


def test_parse_garbage_body_is_bad_request():
    adapter = DiscordAdapter("support", settings_for())
    with pytest.raises(BadRequest):
        adapter.parse(signed(b"not json"))


def test_revision_of_an_own_or_bot_message_or_an_update_without_content_is_ignored() -> None:
    own = {"id": "11", "channel_id": "22", "content": "answer (edited)", "author": {"id": "999", "bot": True}}
    assert revision_of(11, 22, own, event="MESSAGE_UPDATE", bot_user_id="999") == "MESSAGE_UPDATE: own message"
    assert revision_of(11, 22, {"id": "11", "embeds": []}, event="MESSAGE_UPDATE", bot_user_id="999") == \
        "MESSAGE_UPDATE: no content (an embed was added)"
    taken_back = revision_of(11, 22, None, event="MESSAGE_DELETE", bot_user_id="999")
    assert (taken_back.revises, taken_back.deleted, taken_back.conversation.chat) == ("11", True, "22")


def test_revision_of_a_message_addressed_by_the_bots_role_reads_as_a_new_one_does() -> None:
    """"<@&99> how do I reset my pasword" was stored without the mention; its edit kept it, and the model
    got "<@&99> how do I reset my password"."""
    edited = {"id": "11", "channel_id": "22", "guild_id": "33", "content": "<@&99> how do I reset my password",
              "mention_roles": ["99"], "author": {"id": "5", "username": "mason"}}
    revision = revision_of(11, 22, edited, event="MESSAGE_UPDATE", bot_user_id="999", bot_role_ids=("99",))
    assert revision.text == "how do I reset my password" and revision.revises == "11"


def test_revision_of_a_dm_is_a_question_if_never_stored_only_while_its_message_may_still_come() -> None:
    """A DM's edit of a message never stored (its store failed) was ignored, as Telegram's private chats' and Slack's
    DMs' were: the customer's question went unanswered. Every DM is stored, so one sent within the window (by its
    snowflake's date) is the question as edited; an older one's edit (sent before the bot had the chat) is not."""
    now = utcnow()
    for sent, question in ((now - timedelta(seconds=60), True), (now - NEVER_STORED_EDIT_WINDOW - timedelta(minutes=1), False)):
        message_id = discord.utils.time_snowflake(sent)
        edited = {"id": str(message_id), "channel_id": "22", "content": "the price?", "timestamp": sent.isoformat(),
                  "edited_timestamp": now.isoformat(), "author": {"id": "5", "username": "mason"}}
        revision = revision_of(message_id, 22, edited, event="MESSAGE_UPDATE", bot_user_id="999")
        assert revision.revises == str(message_id) and revision.new_if_never_stored is question
        assert revision.conversation == ConversationRef(channel="discord", chat="22") and revision.text == "the price?"


@pytest.mark.parametrize(("content", "text"), [
    (f"hey <@{BOT_USER_ID}> what are your hours?", "hey what are your hours?"),
    (f"hey <@!{BOT_USER_ID}>  <@&99>\twhat?", "hey what?"),
    (f"Hi\n<@{BOT_USER_ID}> first line\nsecond  line <@{BOT_USER_ID}>\nthird", "Hi\nfirst line\nsecond  line\nthird"),
    (f"why <@{BOT_USER_ID}> does\n```\nx  =  1 # <@{BOT_USER_ID}>\n```\nand `a  <@{BOT_USER_ID}>  b`",
     f"why does\n```\nx  =  1 # <@{BOT_USER_ID}>\n```\nand `a  <@{BOT_USER_ID}>  b`"),
])
def test_the_bots_mention_leaves_one_space_where_it_was_and_code_as_written(content: str, text: str):
    """"hey <@bot> what" reached the model as "hey  what". Code shows a mention as typed, so it keeps it; newlines
    and the spacing elsewhere stay as written."""
    payload = {**guild_message(content, mentions=[{"id": BOT_USER_ID}]), "mention_roles": ["99"]}
    message = classify_gateway_message(payload, bot_user_id=BOT_USER_ID, bot_role_ids=("99",))
    assert message.text == text


def test_the_fixture_named_for_a_pin_is_an_ordinary_message_and_a_real_pin_notice_is_ignored():
    payload = json.loads((FIXTURES / "discord4j_discord_json/MessageCreate.Type6.json").read_text())["d"]
    assert payload["type"] == 0  # as captured: what EXPECTED reads it as
    pin = {**payload, "type": 6, "content": "", "mentions": [{"id": BOT_USER_ID}]}
    assert classify_gateway_message(pin, bot_user_id=BOT_USER_ID) == "system message type 6"
