"""TelegramAdapter against a local fake Bot API: rate limits, failures, fallbacks, edits and typing."""

from __future__ import annotations

import re

import pytest

from channels.telegram import TelegramAdapter
from gateway.errors import BotRemoved, ChannelSendError, RecipientUnreachable
from gateway.models import ConversationRef, InboundMessage, OutboundMessage, member_thread
from tests.channels.telegram_helpers import DM, adapter_fixture, fake_fixture  # noqa: F401 - `fake`, `adapter` fixtures
from tests.fakes.telegram_api import FakeTelegramAPI, utf16_len

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


async def test_send_retries_an_html_error_page_as_a_server_error(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    # Telegram's proxies answer 502/504 with an nginx page during outages; aiogram cannot decode it.
    fake.fail_next("sendMessage", status=502, description="Bad Gateway", html=True, times=2)
    assert len(await adapter.send(OutboundMessage(conversation=DM, text="hi"))) == 1
    assert len(fake.sent) == 1 and len(fake.calls("sendMessage")) == 3


async def test_send_gives_an_html_error_page_back_as_retryable_when_it_persists(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=504, description="Gateway Time-out", html=True, times=10)
    with pytest.raises(ChannelSendError) as err:
        await adapter.send(OutboundMessage(conversation=DM, text="hi"))
    assert not err.value.permanent and err.value.retry_after and not fake.sent


async def test_typing_survives_an_html_error_page(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendChatAction", status=502, description="Bad Gateway", html=True)
    await adapter.send_typing(DM)  # best effort: must not raise into the answer
    assert fake.calls("sendChatAction")


async def test_send_to_blocked_user_raises_recipient_unreachable(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=403)
    with pytest.raises(RecipientUnreachable):
        await adapter.send(OutboundMessage(conversation=DM, text="hi"))


@pytest.mark.parametrize("refusal", ["Forbidden: bot was kicked from the supergroup chat",
                                     "Forbidden: bot was blocked by the user"])
async def test_send_refused_as_removed_says_the_bot_was_removed(adapter: TelegramAdapter, fake: FakeTelegramAPI,
                                                                refusal: str) -> None:
    """A 403 "kicked"/"blocked" tells what `my_chat_member` does: `BotRemoved`, which the outbox stores
    (tests/reliability/test_removed_chats.py), so later replies there fail without a call each."""
    group = ConversationRef(channel="telegram", chat="-100777")
    fake.fail_next("sendMessage", status=403, description=refusal)
    with pytest.raises(BotRemoved):
        await adapter.send(OutboundMessage(conversation=group, text="hi"))


async def test_send_refused_for_rights_does_not_say_the_bot_was_removed(adapter: TelegramAdapter,
                                                                        fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=403, description="Forbidden: bot can't initiate conversation with a user")
    with pytest.raises(RecipientUnreachable) as refused:
        await adapter.send(OutboundMessage(conversation=DM, text="hi"))
    assert not isinstance(refused.value, BotRemoved)
    await adapter.send(OutboundMessage(conversation=DM, text="after /start"))
    assert len(fake.sent) == 1


async def test_send_falls_back_to_plain_text_when_html_is_refused(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    fake.fail_next("sendMessage", status=400, description="Bad Request: can't parse entities: test")
    await adapter.send(OutboundMessage(conversation=DM, text="**important** & true"))
    (msg,) = fake.sent
    assert msg.parse_mode is None and msg.text == "important & true"


_LONG = " ".join(f"Step {i} is done." for i in range(500))  # about 8,000 characters, in sentences


@pytest.mark.parametrize(("markdown", "entity"), [
    (f"See [{_LONG}](https://help.example.com/steps) now.", "text_link"),
    (f"Run `{_LONG}` now.", "code"),
    ("Run `" + "x" * 6000 + "` now.", "code"),
    ("**" + "\n".join(f"Step {i} is done." for i in range(500)) + "**", "bold"),
    (f"**Bold [{_LONG}](https://help.example.com/steps) end.**", "text_link"),
], ids=["link", "code", "code-without-spaces", "bold-over-lines", "link-in-bold"])
async def test_send_splits_a_span_longer_than_a_message_keeping_its_formatting(
        adapter: TelegramAdapter, fake: FakeTelegramAPI, markdown: str, entity: str) -> None:
    """A link, code or bold span over 4,096 characters was cut as typed: each part showed its Markdown marks
    ("[Step 0…", "…](https://…)", "`Step…"). Each part closes the span and the next reopens it."""
    await adapter.send(OutboundMessage(conversation=DM, text=markdown))
    assert len(fake.sent) >= 2 and all(m.parse_mode == "HTML" for m in fake.sent)  # no plain-text fallback
    for message in fake.sent:
        assert not re.search(r"\*\*|`|\[|\]\(", message.text), message.text[:80]
        assert utf16_len(message.text) < 10 or any(  # "Run", cut at the last space before code without one
            e["type"] == entity and e["length"] >= utf16_len(message.text) - 10 for e in message.entities)
        assert all(e.get("url", "https://help.example.com/steps") == "https://help.example.com/steps"
                   for e in message.entities)
    words = "".join(m.text for m in fake.sent)
    typed = markdown.replace("https://help.example.com/steps", "")
    assert words.count(" is done.") == typed.count(" is done.") and words.count("x") == typed.count("x")


async def test_send_follows_group_migration_to_supergroup(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    """The move is told to the inbox (which moves the conversation) and remembered: the typing and the
    reply that follow, still for the old id, go to the new one without being refused first."""
    told: list[InboundMessage] = []
    await adapter.start(_appender(told))
    fake.fail_next("sendMessage", status=400, description="Bad Request: group chat was upgraded", migrate_to_chat_id=-1009)
    old = ConversationRef(channel="telegram", chat="-55")
    await adapter.send(OutboundMessage(conversation=old, text="hi"))
    await adapter.send_typing(old)
    await adapter.send(OutboundMessage(conversation=old, text="again"))
    assert [m.chat_id for m in fake.sent] == [-1009, -1009] and len(fake.calls("sendMessage")) == 3
    assert fake.calls("sendChatAction")[0].params["chat_id"] == "-1009"
    assert [(m.conversation.chat, m.moves_to) for m in told] == [("-55", "-1009")]


def _appender(into: list[InboundMessage]):
    async def deliver(message: InboundMessage) -> None:
        into.append(message)
    return deliver


async def test_send_replies_in_the_forum_topic(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    topic = ConversationRef(channel="telegram", chat="-100777", thread="77")
    await adapter.send(OutboundMessage(conversation=topic, text="answer", reply_to="42"))
    assert fake.sent[0].thread_id == 77 and fake.sent[0].reply_to == 42


async def test_send_to_one_members_group_conversation_posts_in_the_group(adapter: TelegramAdapter,
                                                                           fake: FakeTelegramAPI) -> None:
    member = ConversationRef(channel="telegram", chat="-100777", thread=member_thread("367699112"))
    await adapter.send(OutboundMessage(conversation=member, text="answer", reply_to="42"))
    await adapter.send_typing(member)
    assert fake.sent[0].chat_id == -100777 and fake.sent[0].thread_id is None and fake.sent[0].reply_to == 42
    assert fake.sent[0].text == "answer"  # a reply to the member's own message already says whom it is for


async def test_operator_reply_in_a_group_mentions_only_the_member_it_is_for(adapter: TelegramAdapter,
                                                                            fake: FakeTelegramAPI) -> None:
    member = ConversationRef(channel="telegram", chat="-100777", thread=member_thread("367699112"))
    await adapter.send(OutboundMessage(conversation=member, text="Hi, Sam from **support** here.", addressee="Ana <3"))
    await adapter.send(OutboundMessage(conversation=member, text="Still there?", addressee=""))  # no name known
    await adapter.send(OutboundMessage(conversation=member, text="…the rest of a streamed answer."))
    named, unnamed, continued = fake.sent
    assert named.text == "Ana <3 Hi, Sam from support here." and named.reply_to is None
    assert {"type": "text_mention", "offset": 0, "length": 6, "user": {"id": 367699112, "is_bot": False, "first_name": "Ana <3"}} in named.entities
    assert unnamed.text == "367699112 Still there?" and unnamed.entities[0]["type"] == "text_mention"
    # A later part of a streamed answer is not addressed: a mention mid-answer would notify again.
    assert continued.text == "…the rest of a streamed answer." and not continued.entities


async def test_long_operator_reply_in_a_group_keeps_every_part_within_the_limit(adapter: TelegramAdapter,
                                                                                fake: FakeTelegramAPI) -> None:
    member = ConversationRef(channel="telegram", chat="-100777", thread=member_thread("367699112"))
    await adapter.send(OutboundMessage(conversation=member, text="word " * 1700, addressee="A" * 60))
    assert len(fake.sent) == 3 and all(utf16_len(m.text) <= 4096 for m in fake.sent)
    assert fake.sent[0].text.startswith("A" * 60 + " word") and not fake.sent[1].entities


# Edits and typing


async def test_edit_replaces_text_and_tolerates_not_modified(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="Thinking"))
    await adapter.edit(DM, mid, "Thinking **harder**")
    await adapter.edit(DM, mid, "Thinking **harder**")  # Telegram: "message is not modified"
    assert fake.sent[0].text == "Thinking harder" and fake.sent[0].edits == ["Thinking"]
    assert len(fake.calls("editMessageText")) == 2


async def test_edit_falls_back_to_plain_text_when_html_is_refused(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    """As a send does: a streamed answer's edit refused for its HTML failed for good, and the stream stopped."""
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="Thinking"))
    fake.fail_next("editMessageText", status=400, description="Bad Request: can't parse entities: test")
    await adapter.edit(DM, mid, "**important** & true")
    assert fake.sent[0].text == "important & true" and fake.calls("editMessageText")[-1].params.get("parse_mode") is None


async def test_edit_rate_limit_reports_retry_after(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="a"))
    fake.fail_next("editMessageText", status=429, retry_after=3)
    with pytest.raises(ChannelSendError) as err:
        await adapter.edit(DM, mid, "ab")
    assert err.value.retry_after == 3


@pytest.mark.parametrize("method", ["editMessageText", "deleteMessage"])
async def test_edit_and_delete_refused_as_removed_say_the_bot_was_removed(adapter: TelegramAdapter,
                                                                         fake: FakeTelegramAPI, method: str) -> None:
    """A streamed answer's edits and deletions meet the 403 first when the person blocks the bot mid-answer: it
    said `RecipientUnreachable` only, so the outbox stored no removal (a send's 403 is `BotRemoved`)."""
    (mid,) = await adapter.send(OutboundMessage(conversation=DM, text="Thinking"))
    change = adapter.edit(DM, mid, "Thinking harder") if method == "editMessageText" else adapter.delete(DM, mid)
    fake.fail_next(method, status=403, description="Forbidden: bot was blocked by the user")
    with pytest.raises(BotRemoved):
        await change
    fake.fail_next(method, status=403, description="Forbidden: bot can't initiate conversation with a user")
    with pytest.raises(RecipientUnreachable) as refused:
        await (adapter.edit(DM, mid, "Thinking harder") if method == "editMessageText" else adapter.delete(DM, mid))
    assert not isinstance(refused.value, BotRemoved)


async def test_send_typing_sends_chat_action(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    await adapter.send_typing(ConversationRef(channel="telegram", chat="-100777", thread="5"))
    (call,) = fake.calls("sendChatAction")
    assert call.params["action"] == "typing" and call.params["chat_id"] == "-100777"
    assert call.params["message_thread_id"] == "5"


async def test_typing_rate_limited_waits_out_retry_after_in_that_chat(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    """The indicator is refreshed every 4 s while an answer is written: after a 429 it asked again at each refresh,
    each one refused, though Telegram said when to come back."""
    fake.fail_next("sendChatAction", status=429, retry_after=30)
    await adapter.send_typing(DM)  # best effort: refused, not raised
    await adapter.send_typing(DM)
    await adapter.send_typing(ConversationRef(channel="telegram", chat="-100777"))  # another chat is not held up
    assert [c.params["chat_id"] for c in fake.calls("sendChatAction")] == [DM.chat, "-100777"]


async def test_sends_reuse_the_response_models_aiogram_parametrizes(adapter: TelegramAdapter, fake: FakeTelegramAPI,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """aiogram reads every answer as `Response[<the method's type>]`, a generic model pydantic caches only
    weakly: collected between two calls, it was built again (15–25 ms of the event loop's time) for every
    send and typing action. The adapter keeps the ones it uses alive."""
    import gc

    from pydantic._internal import _generics

    built: list[str] = []
    create = _generics.create_generic_submodel
    monkeypatch.setattr(_generics, "create_generic_submodel", lambda name, *a, **k: built.append(name) or create(name, *a, **k))
    for text in ("one", "two"):
        gc.collect()
        await adapter.send(OutboundMessage(conversation=DM, text=text))
        gc.collect()
        await adapter.send_typing(DM)
    assert len(fake.sent) == 2 and built == []
