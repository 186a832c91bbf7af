"""TelegramAdapter: the real aiogram client against a local fake Bot API (tests/fakes/telegram_api.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from aiogram.exceptions import TelegramBadRequest

from channels.base import ChannelAdapter, RawRequest
from channels.telegram import TelegramAdapter, make_bot, set_webhook
from channels.telegram_render import markdown_to_html, render_messages, visible_length
from gateway.errors import BadRequest, ChannelSendError, ConfigError, RecipientUnreachable, SignatureInvalid
from gateway.models import Citation, ConversationRef, InboundMessage, OutboundMessage
from gateway.settings import TelegramChannel
from tests.fakes.telegram_api import FakeTelegramAPI, parse_telegram_html, utf16_len

TOKEN = "723738643:AAH-fake-token_for-tests"
BOT_ID = 723738643
SECRET = "s3cret-Token_value"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "telegram"
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.json"))
DM = ConversationRef(channel="telegram", chat="367699112")


def _settings(base: str = "http://127.0.0.1:9", **overrides: Any) -> TelegramChannel:
    values: dict[str, Any] = {"token": TOKEN, "webhook_secret": SECRET, "api_base": base, **overrides}
    return TelegramChannel(**values)


def _request(body: dict[str, Any] | bytes, secret: str | None = SECRET) -> RawRequest:
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers["x-telegram-bot-api-secret-token"] = secret
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RawRequest(url="https://gw.example/webhooks/demo/telegram", headers=headers, query={}, body=data)


def _update(text: str, *, update_id: int = 5001, chat_type: str = "private", **message: Any) -> dict[str, Any]:
    chat = {"id": -100777 if chat_type != "private" else 367699112, "type": chat_type}
    msg = {"message_id": 42, "date": 1700000000, "chat": chat, "text": text,
           "from": {"id": 367699112, "is_bot": False, "first_name": "Ann", "last_name": "Lee"}, **message}
    return {"update_id": update_id, "message": msg}


@pytest.fixture
async def fake() -> Any:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


@pytest.fixture
async def adapter(fake: FakeTelegramAPI) -> Any:
    tg = TelegramAdapter("demo", _settings(fake.base_url), username="support_bot", max_retry_wait=5)
    yield tg
    await tg.stop()


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
    "edited_message.json": ("ignored", "edited_message"),
    "forwarded_message.json": ("message", "message text"),
    "inline_query.json": ("ignored", "no integer update_id"),
    "message.json": ("message", "Hi, world!"),
    "message_with_audio.json": ("message", ""),
    "message_with_document.json": ("message", "doc description"),
    "message_with_game.json": ("message", ""),
    "message_with_invoice.json": ("ignored", "no integer update_id"),
    "message_with_location.json": ("message", ""),
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
    assert msg.channel == "telegram" and msg.external_id == str(update["update_id"])
    assert msg.text == expected
    assert msg.conversation.chat == str(update["message"]["chat"]["id"])
    assert msg.sender.external_id == str(update["message"]["from"]["id"]) and not msg.sender.is_bot
    assert msg.sent_at.timestamp() == update["message"]["date"]
    if not expected:  # media without a caption still arrives, as attachments
        assert msg.attachments and (msg.attachments[0].file_id or msg.attachments[0].url)


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
    assert not plain.messages and "not addressed" in plain.ignored[0]

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


def test_parse_mention_offsets_are_utf16_units() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    text = "😀😀 @support_bot price?"  # each emoji is 2 UTF-16 units
    result = tg.parse(_request(_update(text, chat_type="group", entities=[{"type": "mention", "offset": 5, "length": 12}])))
    assert result.messages[0].text == "😀😀 price?"


def test_parse_start_and_help_are_flagged_for_the_greeting() -> None:
    tg = TelegramAdapter("demo", _settings(), username="support_bot")
    start = tg.parse(_request(_update("/start", entities=[{"type": "bot_command", "offset": 0, "length": 6}])))
    assert start.messages[0].raw["command"] == "start" and start.messages[0].text == ""
    group_help = tg.parse(_request(_update("/help@support_bot", chat_type="group", entities=[{"type": "bot_command", "offset": 0, "length": 17}])))
    assert group_help.messages[0].raw["command"] == "help"
    ask = tg.parse(_request(_update("/ask where is my order?", chat_type="group", entities=[{"type": "bot_command", "offset": 0, "length": 4}])))
    assert ask.messages[0].text == "where is my order?" and "command" not in ask.messages[0].raw


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


# Rendering against Telegram's HTML rules


def test_fake_rejects_malformed_html_like_telegram() -> None:
    for bad in ("<b>open", "a < b", "<p>para</p>", "<b><i>x</b></i>", "<code><b>x</b></code>"):
        with pytest.raises(ValueError):
            parse_telegram_html(bad)
    assert parse_telegram_html("a &lt; b &amp; &#128512;") == ("a < b & 😀", [])


async def test_fake_answers_malformed_html_with_cant_parse_entities(fake: FakeTelegramAPI) -> None:
    bot = make_bot(_settings(fake.base_url))
    try:
        with pytest.raises(TelegramBadRequest, match="can't parse entities"):
            await bot.send_message(chat_id=1, text="1 < 2 <b>", parse_mode="HTML")
    finally:
        await bot.session.close()
    assert not fake.sent


def test_render_escapes_naughty_strings_into_valid_telegram_html() -> None:
    blns = json.loads((FIXTURES.parents[1] / "badinput" / "blns.json").read_text())
    for text in blns:
        html = markdown_to_html(text)
        parse_telegram_html(html)  # raises on anything Telegram would refuse


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_render_any_markdown_is_valid_telegram_html(text: str) -> None:
    parse_telegram_html(markdown_to_html(text))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["word", "😀", "**b**", "<x>", "&", "\n", "\n\n", "```\ncode\n```", "- item", "https://a.example/p"]), max_size=300))
def test_render_messages_each_fit_the_limit(tokens: list[str]) -> None:
    for message in render_messages(" ".join(tokens), limit=120):
        assert parse_telegram_html(message) and visible_length(message) <= 120


async def test_send_escaping_round_trips_through_telegram(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    answer = ("# Plan & <pricing>\n\nUse **bold** or *it*; 1 < 2 > 0 & `a<b>&c`.\n\n"
              "- see [the docs](https://docs.example/a?b=1&c=\"2\")\n- <script>alert(1)</script>\n\n"
              "```python\nif x < 3 and y > 2:\n    pass\n```")
    ids = await adapter.send(OutboundMessage(conversation=DM, text=answer))
    (msg,) = fake.sent
    assert ids == [str(msg.message_id)] and msg.parse_mode == "HTML"
    assert msg.text == ("Plan & <pricing>\n\nUse bold or it; 1 < 2 > 0 & a<b>&c.\n\n"
                        "• see the docs\n• <script>alert(1)</script>\n\nif x < 3 and y > 2:\n    pass")
    kinds = {e["type"] for e in msg.entities}
    assert {"bold", "italic", "code", "text_link", "pre"} <= kinds
    assert any(e.get("url") == 'https://docs.example/a?b=1&c=%222%22' for e in msg.entities)


async def test_send_splits_long_answer_at_the_utf16_limit(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    paragraphs = [f"Paragraph {i} 😀 " + "emoji 🎉 text " * 40 for i in range(30)]  # ~17k UTF-16 units
    ids = await adapter.send(OutboundMessage(conversation=DM, text="\n\n".join(paragraphs)))
    assert len(ids) == len(fake.sent) == len(fake.calls("sendMessage")) >= 4
    assert all(utf16_len(m.text) <= 4096 for m in fake.sent)
    joined = "\n\n".join(m.text for m in fake.sent)
    assert [p.strip() for p in joined.split("\n\n")] == [p.strip() for p in paragraphs]


async def test_send_never_splits_inside_a_code_block(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    code = "```\n" + "\n".join(f"line {i} <tag> & more" for i in range(60)) + "\n```"
    text = "intro " * 600 + "\n\n" + code + "\n\n" + "outro " * 300
    await adapter.send(OutboundMessage(conversation=DM, text=text))
    pre = [m for m in fake.sent if any(e["type"] == "pre" for e in m.entities)]
    assert len(fake.sent) >= 2 and len(pre) == 1
    assert pre[0].text.count("<tag> & more") == 60


async def test_send_renders_citations_as_links(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    cites = (Citation(source="kb/returns.md", title="Returns & <refunds>", url="https://help.example/returns?x=1&y=2"),
             Citation(source="kb/faq.md", title="FAQ"))
    await adapter.send(OutboundMessage(conversation=DM, text="You have 30 days [1].", citations=cites))
    (msg,) = fake.sent
    assert "Sources:" in msg.text and "1. Returns & <refunds>" in msg.text and "2. FAQ" in msg.text
    links = [e for e in msg.entities if e["type"] == "text_link"]
    assert [link["url"] for link in links] == ["https://help.example/returns?x=1&y=2"]


def test_render_messages_moves_footer_to_its_own_message_when_full() -> None:
    body = "word " * 817  # 4084 chars once stripped: the footer no longer fits
    messages = render_messages(body, (Citation(source="a", title="A title", url="https://a.example"),))
    assert len(messages) == 2 and "https://a.example" in messages[1]
    assert all(visible_length(m) <= 4096 for m in messages)


# Rate limits and failures


async def test_send_honours_retry_after_and_delivers_exactly_once(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=429, retry_after=1)
    ids = await adapter.send(OutboundMessage(conversation=DM, text="hello"))
    calls = fake.calls("sendMessage")
    assert len(ids) == 1 and len(fake.sent) == 1 and len(calls) == 2
    assert calls[1].at - calls[0].at >= 0.95


async def test_send_long_retry_after_surfaces_as_channel_send_error(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=429, retry_after=60)
    with pytest.raises(ChannelSendError) as err:
        await adapter.send(OutboundMessage(conversation=DM, text="hello"))
    assert err.value.retry_after == 60 and not err.value.permanent and not fake.sent


async def test_send_retry_resumes_without_repeating_delivered_parts(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    message = OutboundMessage(conversation=DM, text="\n\n".join(["part " * 700] * 3))
    fake.fail_next("sendMessage", status=429, retry_after=60, skip=1)
    with pytest.raises(ChannelSendError):
        await adapter.send(message)
    assert len(fake.sent) == 1
    ids = await adapter.send(message)  # the worker's retry
    assert len(ids) == len(fake.sent) == 3 and ids[0] == str(fake.sent[0].message_id)


async def test_send_retries_server_errors_with_backoff(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=502)
    assert len(await adapter.send(OutboundMessage(conversation=DM, text="hi"))) == 1
    assert len(fake.sent) == 1


async def test_send_to_blocked_user_raises_recipient_unreachable(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=403)
    with pytest.raises(RecipientUnreachable):
        await adapter.send(OutboundMessage(conversation=DM, text="hi"))


async def test_send_falls_back_to_plain_text_when_html_is_refused(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=400, description="Bad Request: can't parse entities: test")
    await adapter.send(OutboundMessage(conversation=DM, text="**important** & true"))
    (msg,) = fake.sent
    assert msg.parse_mode is None and msg.text == "important & true"


async def test_send_follows_group_migration_to_supergroup(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=400, description="Bad Request: group chat was upgraded", migrate_to_chat_id=-1009)
    await adapter.send(OutboundMessage(conversation=ConversationRef(channel="telegram", chat="-55"), text="hi"))
    assert fake.sent[0].chat_id == -1009


async def test_send_replies_in_the_forum_topic(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    topic = ConversationRef(channel="telegram", chat="-100777", thread="77")
    await adapter.send(OutboundMessage(conversation=topic, text="answer", reply_to="42"))
    assert fake.sent[0].thread_id == 77 and fake.sent[0].reply_to == 42


# Edits, typing, polling, webhook registration


async def test_edit_replaces_text_and_tolerates_not_modified(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="Thinking"))
    await adapter.edit(DM, mid, "Thinking **harder**")
    await adapter.edit(DM, mid, "Thinking **harder**")  # Telegram: "message is not modified"
    assert fake.sent[0].text == "Thinking harder" and fake.sent[0].edits == ["Thinking"]
    assert len(fake.calls("editMessageText")) == 2


async def test_edit_rate_limit_reports_retry_after(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="a"))
    fake.fail_next("editMessageText", status=429, retry_after=3)
    with pytest.raises(ChannelSendError) as err:
        await adapter.edit(DM, mid, "ab")
    assert err.value.retry_after == 3


async def test_send_typing_sends_chat_action(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    await adapter.send_typing(ConversationRef(channel="telegram", chat="-100777", thread="5"))
    (call,) = fake.calls("sendChatAction")
    assert call.params["action"] == "typing" and call.params["chat_id"] == "-100777"
    assert call.params["message_thread_id"] == "5"


async def test_start_learns_username_so_group_mentions_work(fake: FakeTelegramAPI) -> None:
    tg = TelegramAdapter("demo", _settings(fake.base_url))
    text = "@support_bot hi"
    update = _update(text, chat_type="group", entities=[{"type": "mention", "offset": 0, "length": 12}])
    assert not tg.parse(_request(update)).messages
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        assert tg.parse(_request(update)).messages[0].text == "hi"
        assert not fake.calls("getUpdates")  # webhook mode does not poll
    finally:
        await tg.stop()


async def test_polling_delivers_updates_and_stops_cleanly(fake: FakeTelegramAPI) -> None:
    fake.webhook = {"url": "https://old.example/hook"}
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    received: list[InboundMessage] = []
    got_two = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        received.append(message)
        if len(received) == 2:
            got_two.set()

    await tg.start(deliver)
    fake.push_update(_update("first", update_id=9001))
    fake.push_update({"update_id": 9002, "edited_message": _update("x")["message"]})
    fake.push_update(_update("/start", update_id=9003, entities=[{"type": "bot_command", "offset": 0, "length": 6}]))
    await asyncio.wait_for(got_two.wait(), timeout=5)
    started = time.monotonic()
    await tg.stop()
    assert time.monotonic() - started < 3
    assert [m.external_id for m in received] == ["9001", "9003"]
    assert received[0].text == "first" and received[1].raw["command"] == "start"
    assert received[0].sender.display_name == "Ann Lee"  # aiogram's `from_user` dumped back as `from`
    assert fake.calls("deleteWebhook") and not fake.webhook
    assert fake.calls("getUpdates")[0].params["allowed_updates"] == ["message", "edited_message", "channel_post", "edited_channel_post"]


async def test_set_webhook_registers_url_with_secret(fake: FakeTelegramAPI) -> None:
    await set_webhook(_settings(fake.base_url), "https://gw.example/webhooks/demo/telegram")
    assert fake.webhook["url"] == "https://gw.example/webhooks/demo/telegram"
    assert fake.webhook["secret_token"] == SECRET


async def test_set_webhook_refuses_a_secret_telegram_would_reject() -> None:
    with pytest.raises(ConfigError):
        await set_webhook(_settings(webhook_secret="has spaces!"), "https://gw.example/webhooks/demo/telegram")
