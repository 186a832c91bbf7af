"""Slack adapter: real slack_sdk against a local fake Slack, requests signed for real."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from channels.base import ChannelAdapter, RawRequest
from channels.slack import SLACK_MESSAGE_LIMIT, SlackAdapter, markdown_to_mrkdwn, slack_to_plain
from gateway.errors import BadRequest, ChannelSendError, RecipientUnreachable, SignatureInvalid
from gateway.models import Citation, ConversationRef, InboundMessage, OutboundMessage
from gateway.settings import SlackChannel
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, FakeSlack, sign

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SLACK_FIXTURES = FIXTURES / "payloads" / "slack"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
async def fake():
    server = await FakeSlack.start()
    yield server
    await server.stop()


class Sleeps(list):
    """Records the waits the adapter asked for instead of sleeping."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_adapter(fake: FakeSlack | None = None, *, sleeps: Sleeps | None = None, **overrides) -> SlackAdapter:
    cfg = {"bot_token": BOT_TOKEN, "signing_secret": SECRET} | overrides
    if fake is not None:
        cfg["api_base"] = fake.api_base
    return SlackAdapter("demo", SlackChannel(**cfg), sleep=sleeps if sleeps is not None else Sleeps())


def signed(body: bytes, *, content_type: str = "application/json", timestamp: int | None = None,
           extra: dict[str, str] | None = None) -> RawRequest:
    headers = {"content-type": content_type, **sign(body, secret=SECRET, timestamp=timestamp), **(extra or {})}
    return RawRequest(url="https://bots.example.com/webhooks/demo/slack/events", headers=headers, query={}, body=body)


def fixture_request(path: Path) -> RawRequest:
    """Build the body exactly as Slack would post it for this fixture."""
    if path.name.startswith("interactive_"):
        body = urlencode({"payload": path.read_text()}).encode()
        return signed(body, content_type="application/x-www-form-urlencoded")
    if path.name == "slash_command.parsed.json":
        form = urlencode(json.loads(path.read_text())).encode()
        return signed(form, content_type="application/x-www-form-urlencoded")
    if path.suffix == ".txt":
        return signed(path.read_bytes().strip(), content_type="application/x-www-form-urlencoded")
    return signed(path.read_bytes())


def envelope(event: dict, *, event_id: str = "EvX", bot_user: str = "W111") -> dict:
    return {
        "type": "event_callback", "team_id": "T111", "event_id": event_id, "event_time": 1,
        "authorizations": [{"team_id": "T111", "user_id": bot_user, "is_bot": True}], "event": event,
    }


# Every fixture file is listed: a new one fails here until someone decides what it means.
EXPECTED = {
    "url_verification.json": ("response", "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"),
    "event_callback_app_mention.json": ("message", "Hi there!"),
    "event_callback_message_in_thread_im_assistant.json": ("message", "When Slack was released?"),
    "event_callback_assistant_thread_started.json": ("ignored", "event type 'assistant_thread_started'"),
    "event_callback_bot_message_via_response_url.json": ("ignored", "from a bot"),
    "event_callback_member_joined_channel.json": ("ignored", "event type 'member_joined_channel'"),
    "event_callback_message_changed.json": ("ignored", "message_changed"),
    "event_callback_message_deleted.json": ("ignored", "message_deleted"),
    "event_callback_message_file_share.json": ("ignored", "the bot's own message"),
    "event_callback_message_from_bot_user.json": ("ignored", "from a bot"),
    "event_callback_message_in_thread_channel.json": ("ignored", "without a mention"),
    "event_callback_message_subtype_bot_message.json": ("ignored", "from a bot"),
    "event_callback_message_text_with_blocks.json": ("ignored", "the bot's own message"),
    "event_callback_message_thread_broadcast.json": ("ignored", "without a mention"),
    "event_callback_message_user.json": ("ignored", "the bot's own message"),
    "event_callback_reaction_added.json": ("ignored", "event type 'reaction_added'"),
    "interactive_block_actions.json": ("ignored", "interactive payload 'block_actions'"),
    "interactive_global_shortcut.json": ("ignored", "interactive payload 'shortcut'"),
    "interactive_message_action.json": ("ignored", "interactive payload 'message_action'"),
    "interactive_view_submission.json": ("ignored", "interactive payload 'view_submission'"),
    "slash_command.form-urlencoded.txt": ("ignored", "slash command '/hello-world'"),
    "slash_command.parsed.json": ("ignored", "slash command '/hello-world'"),
}
FIXTURE_FILES = sorted(p for p in SLACK_FIXTURES.iterdir() if p.is_file())


def test_slack_fixture_table_covers_every_file():
    assert {p.name for p in FIXTURE_FILES} == set(EXPECTED)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_slack_parse_fixture(path: Path):
    adapter = make_adapter()
    request = fixture_request(path)
    adapter.verify(request)
    result = adapter.parse(request)
    kind, expected = EXPECTED[path.name]
    if kind == "response":
        assert result.response is not None and json.loads(result.response.body) == {"challenge": expected}
        assert not result.messages
    elif kind == "message":
        (message,) = result.messages
        assert isinstance(message, InboundMessage) and message.text == expected
        assert message.external_id == json.loads(path.read_text())["event_id"]
        assert message.sender.external_id == "W222" and not message.sender.is_bot
        assert not result.ignored
    else:
        assert not result.messages and len(result.ignored) == 1
        assert expected in result.ignored[0]


def test_slack_app_mention_replies_in_thread_of_the_mention():
    path = SLACK_FIXTURES / "event_callback_app_mention.json"
    (message,) = make_adapter().parse(fixture_request(path)).messages
    assert message.conversation == ConversationRef("slack", "T111", "C111", "1595926230.009600")
    assert message.reply_to is None
    assert message.sent_at.timestamp() == pytest.approx(1595926230.0096)


def test_slack_dm_thread_reply_keeps_thread():
    path = SLACK_FIXTURES / "event_callback_message_in_thread_im_assistant.json"
    (message,) = make_adapter().parse(fixture_request(path)).messages
    assert message.conversation.chat == "D111" and message.conversation.thread == "1726133698.626339"
    assert message.reply_to == "1726133698.626339"


def test_slack_top_level_dm_stays_one_conversation():
    event = {"type": "message", "user": "U9", "text": "hi", "ts": "1.5", "channel": "D1", "channel_type": "im"}
    (message,) = make_adapter().parse_payload(envelope(event)).messages
    assert message.conversation.thread == ""


def test_slack_mention_in_channel_answered_once():
    text = "<@W111> what are your hours?"
    as_message = {"type": "message", "user": "U9", "text": text, "ts": "2.0", "channel": "C1",
                  "channel_type": "channel"}
    as_mention = {"type": "app_mention", "user": "U9", "text": text, "ts": "2.0", "channel": "C1"}
    adapter = make_adapter()
    first = adapter.parse_payload(envelope(as_message, event_id="Ev1"))
    second = adapter.parse_payload(envelope(as_mention, event_id="Ev2"))
    assert not first.messages and "app_mention" in first.ignored[0]
    (message,) = second.messages
    assert message.text == "what are your hours?" and message.conversation.thread == "2.0"


def test_slack_respond_always_answers_channel_messages_not_mentions():
    adapter = make_adapter(respond_in_groups="always")
    plain = {"type": "message", "user": "U9", "text": "hello all", "ts": "3.0", "channel": "C1",
             "channel_type": "channel"}
    mention = {"type": "app_mention", "user": "U9", "text": "<@W111> hi", "ts": "3.1", "channel": "C1"}
    assert adapter.parse_payload(envelope(plain)).messages[0].text == "hello all"
    assert "respond_in_groups=always" in adapter.parse_payload(envelope(mention)).ignored[0]


def test_slack_thread_reply_to_bot_is_answered_without_mention():
    event = {"type": "message", "user": "U9", "text": "and on Sundays?", "ts": "5.0", "thread_ts": "4.0",
             "parent_user_id": "W111", "channel": "C1", "channel_type": "channel"}
    (message,) = make_adapter().parse_payload(envelope(event)).messages
    assert message.conversation.thread == "4.0" and message.reply_to == "4.0"


def test_slack_file_share_in_dm_becomes_attachment_with_caption():
    body = json.loads((SLACK_FIXTURES / "event_callback_message_file_share.json").read_text())
    body["event"].update(channel="D111", channel_type="im", user="U999")
    (message,) = make_adapter().parse_payload(body).messages
    (attachment,) = message.attachments
    assert message.text == "Here is your file!"
    assert attachment.kind == "image" and attachment.file_id == "F111" and attachment.mime_type == "image/png"
    assert attachment.url == "https://files.slack.com/files-pri/T111-F111/test.png"
    assert attachment.caption == "Here is your file!"


def test_slack_media_without_text_yields_empty_text_message():
    body = json.loads((SLACK_FIXTURES / "event_callback_message_file_share.json").read_text())
    body["event"].update(channel="D111", channel_type="im", user="U999", text="")
    (message,) = make_adapter().parse_payload(body).messages
    assert message.text == "" and message.attachments[0].kind == "image"


def test_slack_retry_delivery_keeps_event_id_and_reports_retry():
    body = (SLACK_FIXTURES / "event_callback_app_mention.json").read_bytes()
    first = make_adapter().parse(signed(body))
    retry = make_adapter().parse(signed(body, extra={"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}))
    assert first.messages[0].idempotency_key == retry.messages[0].idempotency_key == ("slack", "Ev111")
    assert retry.extra["retry_num"] == "1"


def test_slack_inbound_markup_decoded_for_the_model():
    assert slack_to_plain("<@U1|bob> see <https://a.io/?x=1&amp;y=2|docs> &lt;3 <!here>") == (
        "@bob see docs (https://a.io/?x=1&y=2) <3 @here"
    )


def test_slack_parse_rejects_garbage():
    with pytest.raises(BadRequest):
        make_adapter().parse(signed(b"not json"))


# ---- signatures ------------------------------------------------------------------------------


def test_slack_verify_accepts_real_signature():
    make_adapter().verify(signed(b'{"type":"url_verification","challenge":"c"}'))


def test_slack_verify_bad_signature_rejected():
    request = signed(b'{"a":1}')
    tampered = RawRequest(request.url, request.headers, request.query, b'{"a":2}')
    with pytest.raises(SignatureInvalid):
        make_adapter().verify(tampered)


def test_slack_verify_wrong_secret_rejected():
    body = b'{"a":1}'
    headers = {"content-type": "application/json", **sign(body, secret="another-secret")}
    with pytest.raises(SignatureInvalid):
        make_adapter().verify(RawRequest("u", headers, {}, body))


@pytest.mark.parametrize("drop", ["x-slack-signature", "x-slack-request-timestamp"])
def test_slack_verify_missing_signature_rejected(drop: str):
    request = signed(b'{"a":1}')
    headers = {k: v for k, v in request.headers.items() if k != drop}
    with pytest.raises(SignatureInvalid, match="missing"):
        make_adapter().verify(RawRequest(request.url, headers, {}, request.body))


def test_slack_verify_stale_signature_rejected():
    with pytest.raises(SignatureInvalid, match="stale"):
        make_adapter().verify(signed(b'{"a":1}', timestamp=int(time.time()) - 6 * 60))


def test_slack_verify_malformed_timestamp_rejected():
    request = signed(b"{}")
    headers = dict(request.headers) | {"x-slack-request-timestamp": "yesterday"}
    with pytest.raises(SignatureInvalid):
        make_adapter().verify(RawRequest(request.url, headers, {}, request.body))


def test_slack_adapter_satisfies_protocol():
    adapter = make_adapter()
    assert isinstance(adapter, ChannelAdapter)
    assert adapter.capabilities.max_length == 3000 and adapter.capabilities.markdown == "mrkdwn"
    assert adapter.capabilities.threads and adapter.capabilities.edits and not adapter.capabilities.typing


# ---- rendering -------------------------------------------------------------------------------


def test_slack_markdown_converted_and_escaped():
    out = markdown_to_mrkdwn("# Hours\n**Open** 9 & 5 <b>not html</b>\n> quote\n- see [docs](https://x.io/?a=1&b=2)")
    assert out.splitlines() == [
        "*Hours*",
        "*Open* 9 &amp; 5 &lt;b&gt;not html&lt;/b&gt;",
        "> quote",
        "• see <https://x.io/?a=1&amp;b=2|docs>",
    ]


def test_slack_code_block_escaped_not_formatted():
    out = markdown_to_mrkdwn("Run:\n```python\nif a < b and *x*:\n    pass\n```\nDone")
    assert out == "Run:\n```\nif a &lt; b and *x*:\n    pass\n```\nDone"


def test_slack_unsafe_link_scheme_not_linked():
    out = markdown_to_mrkdwn("[click](javascript:alert(1))")
    assert "<javascript" not in out and "click" in out


_CONTROL = re.compile(r"<(?:https?://|mailto:)[^<>\s|]+(?:\|[^<>]*)?>")


def _raw_angles(mrkdwn: str) -> str:
    """What is left after removing real link controls and line-leading quote markers."""
    stripped = _CONTROL.sub("", mrkdwn)
    return re.sub(r"^(\s*)> ", r"\1", stripped, flags=re.MULTILINE)


_PIECES = list("ab <>&*_`[]()\n:/.|#-~") + ["https://x.io/", "```\n", "> "]


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60).map("".join))
def test_slack_mrkdwn_never_leaks_raw_control_characters(text: str):
    out = _raw_angles(markdown_to_mrkdwn(text))
    assert "<" not in out and ">" not in out


def test_slack_naughty_strings_render_safely():
    strings = json.loads((FIXTURES / "badinput" / "blns.json").read_text())
    for text in strings:
        out = _raw_angles(markdown_to_mrkdwn(text))
        assert "<" not in out and ">" not in out, text


# ---- sending ---------------------------------------------------------------------------------

CONV = ConversationRef("slack", "T111", "C111", "1595926230.009600")


async def test_slack_send_posts_in_thread_with_citation_links(fake: FakeSlack):
    adapter = make_adapter(fake)
    citations = (Citation("kb/hours.md", "Opening hours", "https://kb.example.com/hours?a=1&b=2"),
                 Citation("kb/faq.md", "FAQ <internal>"))
    ids = await adapter.send(OutboundMessage(CONV, "We open at **9**.", citations=citations))
    (call,) = fake.calls_to("chat.postMessage")
    assert ids == [call.params["_ts"]]
    assert call.token == BOT_TOKEN
    assert call.params["channel"] == "C111" and call.params["thread_ts"] == "1595926230.009600"
    assert call.params["text"] == (
        "We open at *9*.\n\n*Sources:*\n1. <https://kb.example.com/hours?a=1&amp;b=2|Opening hours>\n"
        "2. FAQ &lt;internal&gt;"
    )


async def test_slack_send_splits_long_answer_at_limit(fake: FakeSlack):
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(12)]
    text = "\n\n".join(paragraphs)
    ids = await make_adapter(fake).send(OutboundMessage(CONV, text, citations=(Citation("s", "T", "https://t.io"),)))
    posted = [c.params["text"] for c in fake.calls_to("chat.postMessage")]
    assert len(ids) == len(posted) > 1
    assert all(len(p) <= SLACK_MESSAGE_LIMIT for p in posted)
    assert all(p.startswith("Paragraph") for p in posted[:-1])  # cut on paragraph boundaries
    assert " ".join(" ".join(posted).split()).startswith(" ".join(text.split()))
    assert posted[-1].endswith("<https://t.io|T>")


async def test_slack_send_honours_retry_after_once(fake: FakeSlack):
    sleeps = Sleeps()
    fake.fail("chat.postMessage", status=429, retry_after=2)
    ids = await make_adapter(fake, sleeps=sleeps).send(OutboundMessage(CONV, "hello"))
    assert fake.count("chat.postMessage") == 2 and len(fake.posted()) == 1
    assert ids == [fake.posted()[0]["ts"]]
    assert sleeps == [2.0]


async def test_slack_send_long_retry_after_surfaces_to_worker(fake: FakeSlack):
    fake.fail("chat.postMessage", status=429, retry_after=120)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake).send(OutboundMessage(CONV, "hello"))
    assert info.value.retry_after == 120 and not info.value.permanent
    assert fake.posted() == []


async def test_slack_send_gives_up_after_bounded_rate_limits(fake: FakeSlack):
    sleeps = Sleeps()
    fake.fail("chat.postMessage", status=429, retry_after=1, times=10)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake, sleeps=sleeps).send(OutboundMessage(CONV, "hello"))
    assert fake.count("chat.postMessage") == 4 and len(sleeps) == 3 and info.value.retry_after == 1


async def test_slack_send_unreachable_channel(fake: FakeSlack):
    fake.fail("chat.postMessage", error="channel_not_found")
    with pytest.raises(RecipientUnreachable):
        await make_adapter(fake).send(OutboundMessage(CONV, "hello"))


async def test_slack_api_base_without_trailing_slash_works(fake: FakeSlack):
    adapter = make_adapter(api_base=fake.api_base.rstrip("/"))
    assert await adapter.send(OutboundMessage(CONV, "hi")) == [fake.posted()[0]["ts"]]


async def test_slack_send_bad_token_is_permanent(fake: FakeSlack):
    adapter = SlackAdapter("demo", SlackChannel(bot_token="xoxb-wrong", signing_secret=SECRET, api_base=fake.api_base))
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(OutboundMessage(CONV, "hello"))
    assert info.value.permanent


async def test_slack_send_resumes_without_duplicating_parts(fake: FakeSlack):
    adapter = make_adapter(fake)
    text = "\n\n".join(f"Part {i}. " + "x " * 1400 for i in range(3))
    # The second part hits a 500: it may or may not have landed, so the adapter does not retry blindly.
    fake.fail_call("chat.postMessage", 2, status=500)
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(OutboundMessage(CONV, text))
    assert not info.value.permanent and len(fake.posted()) == 1
    ids = await adapter.send(OutboundMessage(CONV, text))  # the worker's retry resumes after part 1
    texts = [p["text"] for p in fake.posted()]
    assert len(ids) == 3 and ids == [p["ts"] for p in fake.posted()]
    assert [t.split(".")[0] for t in texts] == ["Part 0", "Part 1", "Part 2"]


async def test_slack_send_connection_refused_retried_then_surfaced():
    sleeps = Sleeps()
    adapter = make_adapter(sleeps=sleeps, api_base="http://127.0.0.1:9/api/")  # discard port: nothing listens
    with pytest.raises(ChannelSendError, match="cannot connect") as info:
        await adapter.send(OutboundMessage(CONV, "hello"))
    assert not info.value.permanent and sleeps == [1, 2, 4]


async def test_slack_edit_uses_chat_update(fake: FakeSlack):
    await make_adapter(fake).edit(CONV, "1700000000.000001", "Now **done** & dusted")
    (call,) = fake.calls_to("chat.update")
    assert call.params == {"channel": "C111", "ts": "1700000000.000001", "text": "Now *done* &amp; dusted"}


async def test_slack_edit_too_long_refused(fake: FakeSlack):
    with pytest.raises(ChannelSendError):
        await make_adapter(fake).edit(CONV, "1.0", "y" * (SLACK_MESSAGE_LIMIT + 1))
    assert fake.count("chat.update") == 0


async def test_slack_send_typing_is_a_no_op(fake: FakeSlack):
    await make_adapter(fake).send_typing(CONV)
    assert fake.calls == []


# ---- start / Socket Mode ---------------------------------------------------------------------


async def test_slack_start_learns_bot_user_for_mentions(fake: FakeSlack):
    adapter = make_adapter(fake)
    await adapter.start(_collector([]))
    body = {"type": "event_callback", "team_id": "T1", "event_id": "Ev9",
            "event": {"type": "message", "user": BOT_USER_ID, "text": "echo", "ts": "1.0", "channel": "D1",
                      "channel_type": "im"}}
    assert adapter.bot_user_id == BOT_USER_ID
    assert "own message" in adapter.parse_payload(body).ignored[0]
    await adapter.stop()


def _collector(into: list):
    async def deliver(message: InboundMessage) -> None:
        into.append(message)

    return deliver


async def test_slack_socket_mode_delivers_and_acks(fake: FakeSlack):
    adapter = make_adapter(fake, app_token=APP_TOKEN)
    delivered: list[InboundMessage] = []
    await adapter.start(_collector(delivered))
    try:
        assert fake.calls_to("apps.connections.open")[0].token == APP_TOKEN
        for _ in range(100):
            if fake.sockets:
                break
            await asyncio.sleep(0.01)
        payload = json.loads((SLACK_FIXTURES / "event_callback_app_mention.json").read_text())
        first = await fake.push(payload)
        ignored = await fake.push(json.loads((SLACK_FIXTURES / "event_callback_reaction_added.json").read_text()))
        await fake.wait_for_ack(first)
        await fake.wait_for_ack(ignored)
        assert [m.text for m in delivered] == ["Hi there!"] and delivered[0].external_id == "Ev111"
    finally:
        await adapter.stop()
    assert adapter._socket is None


async def test_slack_socket_mode_bad_app_token_fails_fast(fake: FakeSlack):
    adapter = make_adapter(fake, app_token="xapp-wrong")
    with pytest.raises(ChannelSendError, match="invalid_auth"):
        await asyncio.wait_for(adapter.start(_collector([])), timeout=5)


async def test_slack_retry_after_a_landed_5xx_finishes_the_reply_without_a_duplicate(fake: FakeSlack):
    text = "\n\n".join(f"Part {i}. " + "x " * 1400 for i in range(3))
    # Slack posts part 2, then answers 500: the adapter cannot tell it landed.
    fake.fail_call("chat.postMessage", 2, status=500, landed=True)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake).send(OutboundMessage(CONV, text, idempotency_key="m41", attempt=1))
    assert not info.value.permanent and len(fake.posted()) == 2
    # The outbox retries after a restart (a new adapter, nothing in memory): Slack is asked first.
    ids = await make_adapter(fake).send(OutboundMessage(CONV, text, idempotency_key="m41", attempt=2))
    posted = fake.posted()
    assert [p["text"].split(".")[0] for p in posted] == ["Part 0", "Part 1", "Part 2"]
    assert ids == [p["ts"] for p in posted]
    assert [p["metadata"]["event_payload"] for p in posted] == [{"reply": "m41", "part": i} for i in range(3)]
    (lookup,) = fake.calls_to("conversations.replies")
    assert lookup.params["ts"] == CONV.thread and lookup.params["include_all_metadata"] in ("true", "1", True)


async def test_slack_retry_posts_again_when_history_cannot_be_read(fake: FakeSlack):
    fake.fail("conversations.replies", error="missing_scope")
    fake.fail_call("chat.postMessage", 1, status=500, landed=True)
    with pytest.raises(ChannelSendError):
        await make_adapter(fake).send(OutboundMessage(CONV, "hello", idempotency_key="m7", attempt=1))
    # Without the history scope nothing is known: at-least-once beats losing the reply.
    await make_adapter(fake).send(OutboundMessage(CONV, "hello", idempotency_key="m7", attempt=2))
    assert [p["text"] for p in fake.posted()] == ["hello", "hello"]


async def test_slack_first_attempt_does_not_read_history(fake: FakeSlack):
    await make_adapter(fake).send(OutboundMessage(CONV, "hello", idempotency_key="m8", attempt=1))
    assert fake.count("conversations.replies") == fake.count("conversations.history") == 0
