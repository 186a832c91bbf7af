"""Slack adapter: request signature verification and parsing of every fixture payload and event shape."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from channels.base import ChannelAdapter, RawRequest
from channels.slack import slack_to_plain
from gateway.errors import BadRequest, SignatureInvalid
from gateway.models import NEVER_STORED_EDIT_WINDOW, ConversationRef, InboundMessage
from tests.channels.slack_helpers import SECRET, SLACK_FIXTURES, make_adapter
from tests.fakes.slack_api import sign


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
    # An edit or a deletion revises the message it names while it waits for its answer (the inbox decides).
    "event_callback_message_changed.json": ("revision", ("1665102338.901939", "updated message")),
    "event_callback_message_deleted.json": ("revision", ("1665368619.804829", None)),
    "event_callback_message_file_share.json": ("ignored", "the bot's own message"),
    "event_callback_message_from_bot_user.json": ("ignored", "from a bot"),
    # A thread reply without a mention: answered only in a thread the bot has a conversation in (the inbox checks).
    "event_callback_message_in_thread_channel.json": ("if in a known thread", "When Slack was released?"),
    "event_callback_message_subtype_bot_message.json": ("ignored", "from a bot"),
    "event_callback_message_text_with_blocks.json": ("ignored", "the bot's own message"),
    "event_callback_message_thread_broadcast.json": ("if in a known thread", "Hi there!"),
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
def test_slack_parse_fixture_is_a_message_a_challenge_answer_or_ignored_with_reason(path: Path):
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
        assert not result.ignored and not message.existing_conversation_only
    elif kind == "revision":
        (message,) = result.messages
        assert (message.revises, None if message.deleted else message.text) == expected
        assert message.conversation.chat == "C111" and not result.ignored
    elif kind == "if in a known thread":
        (message,) = result.messages
        assert message.text == expected and message.existing_conversation_only and not result.ignored
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


def test_slack_deleted_thread_parent_left_as_a_tombstone_withdraws_the_message():
    """A deleted message with thread replies stays as a tombstone: Slack sends `message_changed` whose message
    says "This message was deleted." That replaced the waiting question's text, and was answered."""
    tombstone = {"type": "message", "subtype": "message_changed", "hidden": True, "channel": "C1", "ts": "9.1",
                 "message": {"type": "message", "subtype": "tombstone", "text": "This message was deleted.",
                             "user": "USLACKBOT", "hidden": True, "ts": "5.5", "thread_ts": "5.5", "reply_count": 1},
                 "previous_message": {"type": "message", "text": "what are your hours?", "user": "U9", "ts": "5.5"}}
    (revision,) = make_adapter().parse_payload(envelope(tombstone)).messages
    assert revision.revises == "5.5" and revision.deleted and revision.text == ""


def test_slack_edit_in_an_operator_thread_is_kept_once_answered_and_one_that_changes_no_text_is_ignored():
    """An operator's edit of a thread reply already relayed is stored for the operator channel to pass on
    (elsewhere an edit of an answered message is dropped); a `message_changed` that changes no text (Slack
    adds a link's preview, or a reply count) is no edit, and would have told the operator of one."""
    adapter = make_adapter(operator_channel="COPS")
    before = {"type": "message", "text": "refund is 10", "user": "UOPS", "ts": "5.6", "thread_ts": "5.5"}

    def changed(channel: str, text: str) -> dict:
        return {"type": "message", "subtype": "message_changed", "hidden": True, "channel": channel, "ts": "9.1",
                "message": {**before, "text": text}, "previous_message": before}

    (revision,) = adapter.parse_payload(envelope(changed("COPS", "refund is 12"))).messages
    assert revision.revises == "5.6" and revision.text == "refund is 12" and revision.conversation.thread == "5.5"
    assert revision.stored_if_answered and revision.existing_conversation_only
    (elsewhere,) = adapter.parse_payload(envelope(changed("C1", "refund is 12"))).messages
    assert not elsewhere.stored_if_answered and elsewhere.conversation.thread == ""
    result = adapter.parse_payload(envelope(changed("COPS", "refund is 10")))
    assert not result.messages and "its text did not change" in result.ignored[0]


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


def test_slack_thread_reply_under_a_bot_post_is_answered_without_mention():
    # A thread under one of the bot's own posts (the operator channel's escalation headers).
    event = {"type": "message", "user": "U9", "text": "and on Sundays?", "ts": "5.0", "thread_ts": "4.0",
             "parent_user_id": "W111", "channel": "C1", "channel_type": "channel"}
    (message,) = make_adapter().parse_payload(envelope(event)).messages
    assert message.conversation.thread == "4.0" and message.reply_to == "4.0"
    assert not message.existing_conversation_only


def test_slack_thread_reply_under_a_customer_question_goes_only_into_an_existing_conversation():
    # The bot answered an app_mention under the customer's own message: Slack names the customer as the
    # thread's author. Whether the bot is in that thread is the store's to say (`Inbox.accept`).
    event = {"type": "message", "user": "U111", "text": "and how many devices can I use?", "ts": "6.0",
             "thread_ts": "4.0", "parent_user_id": "U111", "channel": "C13", "channel_type": "channel"}
    (message,) = make_adapter().parse_payload(envelope(event)).messages
    assert message.conversation.thread == "4.0" and message.existing_conversation_only
    top_level = {**event, "ts": "4.0", "thread_ts": None, "parent_user_id": None}
    assert make_adapter().parse_payload(envelope(top_level)).ignored == ("channel message without a mention of the bot",)


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


def test_slack_message_shared_into_a_dm_without_a_comment_is_something_sent_not_an_empty_message():
    """A message shared into the DM comes as an `attachments` entry (`is_share`) with no text of its own: taken
    for an empty message, it was greeted, and the customer never told it could not be read."""
    share = {"is_share": True, "is_msg_unfurl": True, "text": "Your order 1234 shipped", "author_id": "U2",
             "channel_id": "C222", "ts": "1700000000.000100", "fallback": "[November 14th] Your order 1234 shipped"}
    body = envelope({"type": "message", "channel": "D111", "channel_type": "im", "user": "U999", "text": "",
                     "ts": "1700000001.000200", "attachments": [share]})
    (message,) = make_adapter().parse_payload(body).messages
    assert message.text == "" and [(a.kind, a.caption) for a in message.attachments] == [("other", "shared message")]


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


def test_slack_link_preview_without_a_previous_message_is_no_edit():
    """Slack adds a link's preview (an unfurl) with a `message_changed` that need not carry `previous_message`,
    and has no `edited`: read as an edit of the same text, in an operator thread it was stored and handled as one."""
    adapter = make_adapter(operator_channel="COPS")
    message = {"type": "message", "text": "see <https://example.com/a>", "user": "UOPS", "ts": "5.6", "thread_ts": "5.5",
               "attachments": [{"from_url": "https://example.com/a", "title": "A"}]}
    for channel in ("COPS", "C1"):
        unfurl = {"type": "message", "subtype": "message_changed", "hidden": True, "channel": channel, "ts": "9.1",
                  "message": message}
        result = adapter.parse_payload(envelope(unfurl))
        assert not result.messages and "no edit" in result.ignored[0]
    edited = {**message, "text": "see <https://example.com/b>", "edited": {"user": "UOPS", "ts": "9.2"}}
    (revision,) = adapter.parse_payload(envelope({"type": "message", "subtype": "message_changed", "hidden": True,
                                                  "channel": "COPS", "ts": "9.2", "message": edited})).messages
    assert revision.revises == "5.6" and revision.text == "see https://example.com/b"


def test_slack_edit_whose_message_lacks_its_user_is_still_the_members_edit():
    """Only a change naming no member at all is dropped as an integration's: one whose `previous_message` names
    the member is still an edit."""
    before = {"type": "message", "text": "refund is 10", "user": "UOPS", "ts": "5.6", "thread_ts": "5.5"}
    after = {"type": "message", "text": "refund is 12", "ts": "5.6", "thread_ts": "5.5", "edited": {"ts": "9.1"}}
    changed = {"type": "message", "subtype": "message_changed", "hidden": True, "channel": "COPS", "ts": "9.1",
               "message": after, "previous_message": before}
    (revision,) = make_adapter(operator_channel="COPS").parse_payload(envelope(changed)).messages
    assert revision.revises == "5.6" and revision.text == "refund is 12"
    result = make_adapter(operator_channel="COPS").parse_payload(envelope({**changed, "previous_message": {
        k: v for k, v in before.items() if k != "user"}}))
    assert not result.messages and "without a user" in result.ignored[0]


def test_slack_dm_edit_is_a_question_if_never_stored_only_while_its_message_may_still_be_retried():
    """A DM whose first delivery failed and was edited meanwhile: the `message_changed` came first and was dropped,
    and Slack's retry of the original was answered on the text the customer had replaced. An edit of an older DM,
    or of a channel message (one that never named the bot), is no question."""
    now = time.time()
    old = now - NEVER_STORED_EDIT_WINDOW.total_seconds() - 60

    def changed(channel: str, channel_type: str, sent: float) -> dict:
        before = {"type": "message", "text": "how much?", "user": "U9", "ts": f"{sent:.6f}"}
        return {"type": "message", "subtype": "message_changed", "hidden": True, "channel": channel,
                "channel_type": channel_type, "ts": f"{now:.6f}", "previous_message": before,
                "message": {**before, "text": "the price?", "edited": {"user": "U9", "ts": f"{now:.6f}"}}}

    (dm,) = make_adapter().parse_payload(envelope(changed("D1", "im", now - 60))).messages
    assert dm.new_if_never_stored and dm.revises == f"{now - 60:.6f}" and dm.conversation.thread == ""
    assert dm.raw["message_id"] == dm.revises and abs(dm.sent_at.timestamp() - (now - 60)) < 1  # its own, once stored
    for channel, channel_type, sent in (("D1", "im", old), ("C1", "channel", now - 60)):
        (edit,) = make_adapter().parse_payload(envelope(changed(channel, channel_type, sent))).messages
        assert not edit.new_if_never_stored


def test_slack_channel_edit_is_a_question_if_never_stored_where_every_channel_message_is_answered():
    """With `respond_in_groups: always` every channel message is a question, as a DM is: one whose first delivery
    failed and that the member edited meanwhile was lost (its edit dropped as one of a message already answered,
    Slack's retry answered on the replaced text). Its edit is the question now, in the conversation the message
    would have opened; never in the operator channel, with `mention`, for a deletion or for an old message."""
    now = time.time()

    def changed(sent: float, *, thread_ts: str | None = None, subtype: str = "message_changed") -> dict:
        before = {"type": "message", "text": "how much?", "user": "U9", "ts": f"{sent:.6f}",
                  **({"thread_ts": thread_ts} if thread_ts else {})}
        event = {"type": "message", "subtype": subtype, "hidden": True, "channel": "C1", "channel_type": "channel",
                 "ts": f"{now:.6f}", "previous_message": before}
        if subtype == "message_deleted":
            return event | {"deleted_ts": before["ts"]}
        return event | {"message": {**before, "text": "the price?", "edited": {"user": "U9", "ts": f"{now:.6f}"}}}

    always = make_adapter(respond_in_groups="always")
    (top,) = always.parse_payload(envelope(changed(now - 60))).messages
    assert top.new_if_never_stored and top.revises == f"{now - 60:.6f}" == top.conversation.thread
    assert top.raw["message_id"] == top.revises and top.reply_to is None and abs(top.sent_at.timestamp() - now + 60) < 1
    (reply,) = always.parse_payload(envelope(changed(now - 60, thread_ts="5.5"))).messages
    assert reply.new_if_never_stored and reply.conversation.thread == reply.reply_to == "5.5"
    old = now - NEVER_STORED_EDIT_WINDOW.total_seconds() - 60
    for adapter, event in ((make_adapter(), changed(now - 60)), (always, changed(old)),
                           (always, changed(now - 60, subtype="message_deleted")),
                           (make_adapter(respond_in_groups="always", operator_channel="C1"), changed(now - 60))):
        (edit,) = adapter.parse_payload(envelope(event)).messages
        assert not edit.new_if_never_stored
