"""TelegramAdapter: the adapter contract, webhook secret verification and parsing of every fixture update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from channels.base import ChannelAdapter
from channels.telegram import TelegramAdapter
from channels.telegram_updates import delivery_key
from gateway.errors import BadRequest, ConfigError, SignatureInvalid
from gateway.models import NEVER_STORED_EDIT_WINDOW, utcnow
from gateway.settings import TelegramChannel
from tests.channels.telegram_helpers import FIXTURES, SECRET, _request, _settings, _update

BOT_ID = 723738643
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.json"))


# Contract and verification


def test_adapter_satisfies_channel_protocol() -> None:
    tg = TelegramAdapter("demo", _settings())
    assert isinstance(tg, ChannelAdapter)
    assert (tg.capabilities.max_length, tg.capabilities.length_unit, tg.capabilities.markdown) == (4096, "utf16", "html")
    assert tg.capabilities.edits and tg.capabilities.typing and tg.capabilities.threads


def test_verify_accepts_the_configured_secret() -> None:
    TelegramAdapter("demo", _settings()).verify(_request(_update("hi")))


@pytest.mark.parametrize("secret", ["wrong-secret", "", None, SECRET + "x", SECRET[:-1]], ids=["bad", "empty", "missing", "longer", "prefix"])
def test_verify_rejects_bad_or_missing_secret(secret: str | None) -> None:
    with pytest.raises(SignatureInvalid):
        TelegramAdapter("demo", _settings()).verify(_request(_update("hi"), secret=secret))


def test_verify_refuses_everything_when_no_secret_is_configured() -> None:
    tg = TelegramAdapter("demo", _settings(webhook_secret=""))
    with pytest.raises(SignatureInvalid):
        tg.verify(_request(_update("hi"), secret=""))


def test_constructor_rejects_malformed_token() -> None:
    with pytest.raises(ConfigError):
        TelegramAdapter("demo", TelegramChannel(token="not-a-token", webhook_secret=SECRET))


# Parsing

EXPECTED = {  # file name -> ("message", text) or ("ignored", reason fragment)
    "callback_query_with_message_inline_keyboard.json": ("ignored", "callback_query"),
    "group_message_bot_command.json": ("ignored", "unsupported command /echo"),
    "group_message_bot_command_with_botname.json": ("ignored", "another bot @bot"),
    "message_text_private.json": ("message", "message"),
    "edited_message.json": ("edit", "hi there (edited)"),  # applied only while the message waits (inbox)
    "forwarded_message.json": ("message", "message text"),
    "inline_query.json": ("ignored", "no integer update_id"),
    "message.json": ("message", "Hi, world!"),
    "message_with_audio.json": ("message", ""),
    "message_with_document.json": ("message", "doc description"),
    "message_with_game.json": ("message", ""),
    "message_with_invoice.json": ("ignored", "no integer update_id"),
    "message_with_location.json": ("message", "Shared location: (55.693416, 37.624605)"),
    "message_with_photo.json": ("message", "photo description"),
    "message_with_sticker.json": ("message", ""),
    "message_with_successful_payment.json": ("ignored", "service message (successful_payment)"),
    "message_with_video.json": ("message", "description"),
    "message_with_voice.json": ("message", ""),
    "pre_checkout_query.json": ("ignored", "pre_checkout_query"),
    "reply_message.json": ("message", "Reply to quoted message"),
    "shipping_query.json": ("ignored", "shipping_query"),
}


def test_parse_fixture_table_covers_every_fixture_file() -> None:
    assert FIXTURE_FILES, f"no fixtures found under {FIXTURES}"
    assert {f.name for f in FIXTURE_FILES} == set(EXPECTED)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_parse_fixture_is_normalized_or_ignored_with_reason(path: Path) -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    raw = _request(path.read_bytes())
    tg.verify(raw)
    result = tg.parse(raw)
    kind, expected = EXPECTED[path.name]
    if kind == "ignored":
        assert not result.messages
        assert any(expected in reason for reason in result.ignored), result.ignored
        return
    (msg,) = result.messages
    update = json.loads(path.read_bytes())
    if kind == "edit":
        edited = update["edited_message"]
        assert (msg.revises, msg.text, msg.conversation.chat) == (str(edited["message_id"]), expected,
                                                                   str(edited["chat"]["id"]))
        return
    assert msg.revises is None
    assert msg.channel == "telegram" and msg.external_id == delivery_key(
        update["update_id"], update["message"]["chat"]["id"], update["message"]["message_id"])
    assert msg.text == expected
    assert msg.conversation.chat == str(update["message"]["chat"]["id"])
    assert msg.sender.external_id == str(update["message"]["from"]["id"]) and not msg.sender.is_bot
    assert msg.sent_at.timestamp() == update["message"]["date"]
    assert msg.sequence == update["message"]["message_id"]  # a burst's pieces are joined in this order
    if not expected:  # media without a caption still arrives, as attachments
        assert msg.attachments and (msg.attachments[0].file_id or msg.attachments[0].url)


def test_parse_content_newer_than_the_parser_is_unknown_media_not_silence() -> None:
    # Bot API 7.6 `paid_media`: not in our media table, yet the customer sent something and gets the
    # text-only reply; a real service message (a pinned message) is still ignored.
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    paid = _update("", paid_media={"star_count": 5, "paid_media": [{"type": "preview"}]})
    del paid["message"]["text"]
    (msg,) = tg.parse(_request(paid)).messages
    assert msg.text == "" and msg.attachments[0].kind == "other" and msg.attachments[0].caption == "paid_media"
    pinned = _update("", pinned_message={"message_id": 1, "date": 1700000000, "chat": {"id": 1, "type": "private"}})
    del pinned["message"]["text"]
    result = tg.parse(_request(pinned))
    assert not result.messages and result.ignored == ("update 5001: service message (pinned_message) ignored",)


def test_parse_media_caption_becomes_text_and_attachment_metadata() -> None:
    result = TelegramAdapter("demo", _settings()).parse(_request((FIXTURES / "illemius_telegram_types" / "message_with_photo.json").read_bytes()))
    (att,) = result.messages[0].attachments
    assert att.kind == "image" and att.caption == "photo description"
    assert att.file_id == "AgADAgADOagxG8vyeUvsltCem_XPv5A6Sw0ABNXULc5u7jny5VkRAAEC"  # the largest size


def test_parse_garbage_body_raises_bad_request() -> None:
    tg = TelegramAdapter("demo", _settings())
    for body in (b"not json", b"[1, 2]", b"\xff\xfe"):
        with pytest.raises(BadRequest):
            tg.parse(_request(body))


def test_parse_group_message_needs_mention_reply_or_command() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    plain = tg.parse(_request(_update("what are your hours?", chat_type="supergroup")))
    assert plain.messages[0].only_while_held  # kept only while a person talks with this member (the inbox)

    text = "@Support_Bot what are your hours?"
    mention = tg.parse(_request(_update(text, chat_type="supergroup", entities=[{"type": "mention", "offset": 0, "length": 12}])))
    assert mention.messages[0].text == "what are your hours?"

    reply = _update("and on Sunday?", chat_type="group", reply_to_message={
        "message_id": 7, "date": 1700000000, "chat": {"id": -100777, "type": "group"},
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Support"}, "text": "9 to 5"})
    parsed = tg.parse(_request(reply))
    assert parsed.messages[0].text == "and on Sunday?" and parsed.messages[0].reply_to == "7"

    always = TelegramAdapter("demo", _settings(respond_in_groups="always"))
    assert always.parse(_request(_update("what are your hours?", chat_type="group"))).messages


def test_respond_in_groups_always_does_not_answer_every_channel_post() -> None:
    """A channel's posts are its admins' news: with `always` the bot answered each one in public, and two
    such bots in one channel answered each other (a channel post names no author, so no bot is seen)."""
    always = TelegramAdapter("demo", _settings(respond_in_groups="always"), username="support_bot")
    channel = {"id": -100888, "type": "channel", "title": "Acme news"}

    def post(text: str, **extra: object) -> dict:
        return {"update_id": 5002, "channel_post": {"message_id": 9, "date": 1700000000, "chat": channel,
                                                    "sender_chat": channel, "text": text, **extra}}

    (news,) = always.parse(_request(post("Version 2 is out"))).messages
    assert news.only_while_held  # the inbox stores it only while a person talks there: not answered
    (asked,) = always.parse(_request(post("@support_bot is v2 free?", entities=[
        {"type": "mention", "offset": 0, "length": 12}]))).messages
    assert not asked.only_while_held and asked.text == "is v2 free?"
    # Telegram copies each post into the channel's discussion group, a supergroup: not answered there either.
    group = {"id": -100999, "type": "supergroup", "title": "Acme news chat"}
    copy = {"update_id": 5003, "message": {"message_id": 10, "date": 1700000000, "chat": group, "sender_chat": channel,
                                           "is_automatic_forward": True, "text": "Version 2 is out"}}
    (copied,) = always.parse(_request(copy)).messages
    assert copied.only_while_held
    member = {"update_id": 5004, "message": {"message_id": 11, "date": 1700000000, "chat": group,
                                             "sender_chat": {"id": -100777, "type": "channel", "title": "Bo's blog"},
                                             "text": "is v2 free for my team?"}}
    (asks,) = always.parse(_request(member)).messages  # a member posting as their own channel: a customer
    assert not asks.only_while_held


def test_parse_mention_offsets_are_utf16_units() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    text = "😀😀 @support_bot price?"  # each emoji is 2 UTF-16 units
    result = tg.parse(_request(_update(text, chat_type="group", entities=[{"type": "mention", "offset": 5, "length": 12}])))
    assert result.messages[0].text == "😀😀 price?"


def test_parse_a_mention_taken_out_keeps_the_messages_line_breaks() -> None:
    """The mention's spaces went, and so did every line break: the steps a customer listed became one line."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    text = "@support_bot  la app se cierra:\n1. abro 📱\n2. toco «Sincronizar»"
    result = tg.parse(_request(_update(text, chat_type="group", entities=[{"type": "mention", "offset": 0, "length": 12}])))
    assert result.messages[0].text == "la app se cierra:\n1. abro 📱\n2. toco «Sincronizar»"


def test_parse_start_and_help_are_flagged_for_the_greeting() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    start = tg.parse(_request(_update("/start", entities=[{"type": "bot_command", "offset": 0, "length": 6}])))
    assert start.messages[0].raw["command"] == "start" and start.messages[0].text == ""
    group_help = tg.parse(_request(_update("/help@support_bot", chat_type="group", entities=[{"type": "bot_command", "offset": 0, "length": 17}])))
    assert group_help.messages[0].raw["command"] == "help"
    ask = tg.parse(_request(_update("/ask where is my order?", chat_type="group", entities=[{"type": "bot_command", "offset": 0, "length": 4}])))
    assert ask.messages[0].text == "where is my order?" and "command" not in ask.messages[0].raw


def test_parse_a_command_that_mentions_the_bot_keeps_the_question_whole() -> None:
    """`/ask @support_bot what…`: the mention's offsets (the whole text's) were cut out of the text after the
    command, so the question came out as "@supp is the price"; and `/help @support_bot` was a question."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    cmd, mention = {"type": "bot_command", "offset": 0, "length": 4}, {"type": "mention", "offset": 5, "length": 12}
    ask = tg.parse(_request(_update("/ask @support_bot what is the price", chat_type="group", entities=[cmd, mention])))
    assert ask.messages[0].text == "what is the price"
    bare = tg.parse(_request(_update("/help @support_bot", chat_type="group", entities=[{**cmd, "length": 5},
                                                                                   {**mention, "offset": 6}])))
    assert bare.messages[0].raw.get("command") == "help" and bare.messages[0].text == ""


def test_parse_start_with_a_deep_link_payload_keeps_it_apart_from_the_text() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    start = tg.parse(_request(_update("/start order123", entities=[{"type": "bot_command", "offset": 0, "length": 6}])))
    [message] = start.messages
    assert (message.text, message.raw["command"], message.raw["start_payload"]) == ("", "start", "order123")


@pytest.mark.parametrize(("chat", "field", "old", "new"), [
    ({"id": -4001, "type": "group", "title": "Shop"}, {"migrate_to_chat_id": -1004001}, "-4001", "-1004001"),
    ({"id": -1004001, "type": "supergroup", "title": "Shop"}, {"migrate_from_chat_id": -4001}, "-4001", "-1004001"),
], ids=["in-old-group", "in-new-supergroup"])
def test_parse_a_group_upgraded_to_a_supergroup_moves_its_chat(chat, field, old, new) -> None:
    """Telegram's two notices of the upgrade were ignored as service messages: the conversations stayed
    at the old id, which no longer receives anything."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    body = {"update_id": 7001, "message": {"message_id": 9, "date": 1700000000, "chat": chat,
                                           "from": {"id": 367699112, "is_bot": False, "first_name": "Ann"}, **field}}
    [move] = tg.parse(_request(body)).messages
    assert (move.conversation.chat, move.moves_to, move.text) == (old, new, "")


def test_parse_ignores_own_and_other_bots_messages() -> None:
    tg = TelegramAdapter("demo", _settings())
    own = tg.parse(_request(_update("echo", **{"from": {"id": BOT_ID, "is_bot": True, "first_name": "Me"}})))
    other = tg.parse(_request(_update("spam", **{"from": {"id": 99, "is_bot": True, "first_name": "Other"}})))
    assert not own.messages and "our own message" in own.ignored[0]
    assert not other.messages and "another bot" in other.ignored[0]


def test_parse_forum_topic_sets_thread() -> None:
    tg = TelegramAdapter("demo", _settings(respond_in_groups="always"))
    result = tg.parse(_request(_update("hi", chat_type="supergroup", message_thread_id=77, is_topic_message=True)))
    assert result.messages[0].conversation.thread == "77"


def test_a_message_in_a_forum_topic_the_bot_created_is_no_reply_to_the_bot() -> None:
    """Telegram sends every message of a forum topic as a reply to the topic's creation (a service message):
    in a topic the bot opened, each member's message read as a reply to the bot, answered without a mention."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    bot = {"id": BOT_ID, "is_bot": True, "first_name": "Support", "username": "support_bot"}
    created = {"message_id": 77, "date": 1700000000, "chat": {"id": -100777, "type": "supergroup", "is_forum": True},
               "from": bot, "message_thread_id": 77, "forum_topic_created": {"name": "Order 1234", "icon_color": 7322096}}
    topic = {"chat_type": "supergroup", "message_thread_id": 77, "is_topic_message": True}
    [chatter] = tg.parse(_request(_update("thanks all, see you tomorrow", reply_to_message=created, **topic))).messages
    assert chatter.only_while_held and chatter.reply_to is None and chatter.conversation.thread == "77"
    answer = {"message_id": 80, "date": 1700000000, "chat": created["chat"], "from": bot, "message_thread_id": 77,
              "is_topic_message": True, "text": "Your order ships Monday."}
    [reply] = tg.parse(_request(_update("and to Berlin?", reply_to_message=answer, **topic))).messages
    assert not reply.only_while_held and reply.reply_to == "80"


def test_each_member_of_a_group_has_a_conversation_of_their_own() -> None:
    """In a group, what a tool returned for one member must not be history for another member's answer."""
    tg = TelegramAdapter("demo", _settings(respond_in_groups="always"))

    def conversation(sender: int, update_id: int, **extra):
        member = {"id": sender, "is_bot": False, "first_name": f"m{sender}"}
        update = _update("where is my order?", update_id=update_id, chat_type="supergroup", **{"from": member}, **extra)
        return tg.parse(_request(update)).messages[0].conversation

    ann, bob, ann_again = conversation(367699112, 1), conversation(367699113, 2), conversation(367699112, 3)
    assert ann != bob and ann == ann_again and ann.chat == bob.chat == "-100777"
    assert ann.member == "367699112" and bob.member == "367699113"
    # A forum topic is a discussion people join: one conversation for everyone in it.
    topic = {"message_thread_id": 77, "is_topic_message": True}
    assert conversation(367699112, 4, **topic) == conversation(367699113, 5, **topic)
    assert conversation(367699112, 6, **topic).member is None
    private = tg.parse(_request(_update("hi", update_id=7))).messages[0].conversation
    assert private.thread == "" and private.member is None


def test_parse_a_live_location_and_its_moves_are_flagged_as_a_place_that_moves() -> None:
    """Each move of a live location is an `edited_message` (every few seconds, for up to 8 hours): flagged,
    the inbox applies it as the place moving, never as a question or an edit to answer. A location sent once
    (no `live_period`) is not live; nor is an edit of text."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    here = {"latitude": 52.52, "longitude": 13.405, "live_period": 900}
    [shared] = tg.parse(_request(_update("", location=here))).messages
    there = _update("", update_id=5002, chat_type="supergroup", edit_date=1700000030,
                    location=here | {"latitude": 52.5163, "heading": 90})["message"]
    [moved] = tg.parse(_request({"update_id": 5002, "edited_message": there})).messages
    everything = TelegramAdapter("demo", _settings(respond_in_groups="always"), username="support_bot")
    [in_group] = everything.parse(_request({"update_id": 5002, "edited_message": there})).messages
    assert shared.live_location and shared.revises is None
    assert moved.live_location and moved.revises == "42" and moved.text == "Shared location: (52.5163, 13.405)"
    # A group the bot answers in whole: still no question of one it never stored (it joined after the sharing began).
    assert in_group.live_location and not in_group.new_if_never_stored
    [once] = tg.parse(_request(_update("", location={"latitude": 52.52, "longitude": 13.405}))).messages
    typo = _update("teh price?", update_id=5003, edit_date=1700000030)["message"]
    [edited] = tg.parse(_request({"update_id": 5003, "edited_message": typo})).messages
    assert not once.live_location and not edited.live_location


def test_parse_a_private_edit_is_a_question_if_never_stored_only_while_its_message_may_still_be_resent() -> None:
    """A private chat's edit of a message whose first delivery failed came first, and was dropped: Telegram's resend
    of the original was then answered on the text the customer had replaced. One of an older message is no question."""
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    now = int(utcnow().timestamp())
    for date, question in ((now - 60, True), (now - int(NEVER_STORED_EDIT_WINDOW.total_seconds()) - 60, False)):
        edit = _update("the price?", update_id=5004, date=date, edit_date=now)["message"]
        [edited] = tg.parse(_request({"update_id": 5004, "edited_message": edit})).messages
        assert edited.revises == "42" and edited.new_if_never_stored is question
