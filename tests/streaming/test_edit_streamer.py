"""EditStreamer with the real TelegramAdapter (aiogram) against the local fake Bot API."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from channels.telegram import TelegramAdapter
from gateway.delivery.streaming import SURPLUS_TEXT, EditStreamer, compose, streamer_for
from gateway.errors import ChannelSendError
from gateway.models import Citation, ConversationRef, OutboundMessage
from gateway.settings import TelegramChannel
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.streaming.conftest import numbered_words, shown_twice, telegram_timeline, words

TOKEN = "723738643:AAH-fake-token_for-tests"
INTERVAL = 0.15


@pytest.fixture
async def fake() -> Any:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


@pytest.fixture
async def adapter(fake: FakeTelegramAPI) -> Any:
    tg = TelegramAdapter("demo", TelegramChannel(token=TOKEN, webhook_secret="s3cret", api_base=fake.base_url,
                                                 stream=True), max_retry_wait=5)
    yield tg
    await tg.stop()


def ref(chat: int) -> ConversationRef:
    return ConversationRef(channel="telegram", chat=str(chat))


async def stream(streamer: EditStreamer, tokens: list[str], *, delay: float = 0.0) -> None:
    for token in tokens:
        await streamer.feed(token)
        await asyncio.sleep(delay)
    await streamer.close()


def chat_calls(fake: FakeTelegramAPI, chat: int) -> list[Any]:
    return [c for c in fake.requests if c.method.lower() in ("sendmessage", "editmessagetext")
            and str(c.params.get("chat_id")) == str(chat)]


async def test_streamer_sends_once_then_edits_at_most_once_per_interval(fake, adapter):
    streamer = EditStreamer(adapter, ref(11), reply_to="77", min_interval=INTERVAL)
    tokens = numbered_words(60)
    await stream(streamer, tokens, delay=0.01)
    calls = chat_calls(fake, 11)
    assert [c.method.lower() for c in calls][0] == "sendmessage"
    assert len(calls) >= 3 and all(c.method.lower() == "editmessagetext" for c in calls[1:])
    assert all(b.at - a.at >= INTERVAL for a, b in zip(calls, calls[1:]))
    assert calls[0].params["reply_parameters"]["message_id"] == 77  # the partial answers the question
    final = "".join(tokens) + " [1]"
    cited = (Citation("help", "Plans", "https://x.test/p"),)
    ids = await streamer.finish(OutboundMessage(ref(11), final, citations=cited))
    [message] = [m for m in fake.sent if m.chat_id == 11]
    assert ids == [str(message.message_id)]
    assert words(message.text) == words(final)
    assert message.text.rstrip().endswith("Plans") and "Sources:" in message.text
    assert len(chat_calls(fake, 11)) == len(calls) + 1  # one final edit, no second sendMessage


async def test_after_a_restart_the_next_tokens_take_the_place_of_what_streamed(fake, adapter):
    """A tool round's preamble was streamed, and the answer's tokens were appended to it ("…guide [1].Your
    invoice is paid") in the same message (review)."""
    streamer = EditStreamer(adapter, ref(19), min_interval=INTERVAL)
    await streamer.feed("Plans are in the billing guide [1].")
    await until(lambda: [m.text for m in fake.sent if m.chat_id == 19] == ["Plans are in the billing guide [1]."])
    streamer.restart()
    await streamer.feed("Your invoice is paid.")
    await until(lambda: [m.text for m in fake.sent if m.chat_id == 19] == ["Your invoice is paid."])
    await streamer.close()


async def test_a_restart_during_a_rollover_still_shows_the_new_text(fake, adapter):
    """The rollover moved the start of the shown text past what the restart had emptied: the answer's
    tokens were not shown at all until the final reply."""
    streamer = EditStreamer(adapter, ref(20), min_interval=0.02)
    send = adapter.send

    async def send_then_restart(message):
        ids = await send(message)
        if adapter.send is send_then_restart:  # once: the head of the rollover is out
            adapter.send = send
            streamer.restart()
            await streamer.feed("Your invoice is paid.")
        return ids

    adapter.send = send_then_restart
    await streamer.feed("".join(numbered_words(900)))  # past one message: the first flush rolls over
    await until(lambda: [m.text for m in fake.sent if m.chat_id == 20][-1:] == ["Your invoice is paid."])
    await streamer.close()


async def until(condition, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_streamer_rolls_over_past_the_limit_without_showing_text_twice(fake, adapter):
    streamer = EditStreamer(adapter, ref(12), min_interval=0.02)
    tokens = numbered_words(1400)  # about 8,400 characters: three Telegram messages
    await stream(streamer, tokens[:700], delay=0.0005)
    timeline = telegram_timeline(fake, 12)
    assert [shown_twice(state) for state in timeline if shown_twice(state)] == []
    ids = await streamer.finish(OutboundMessage(ref(12), "".join(tokens)))  # the rest: new messages
    timeline = telegram_timeline(fake, 12)
    assert [shown_twice(state) for state in timeline if shown_twice(state)] == []
    messages = [m for m in fake.sent if m.chat_id == 12]
    assert len(messages) == len(ids) == 3
    assert [w for m in messages for w in words(m.text)] == words("".join(tokens))
    assert all(len(m.text.encode("utf-16-le")) // 2 <= 4096 for m in messages)


async def test_streamer_long_stream_rolls_over_while_streaming(fake, adapter):
    streamer = EditStreamer(adapter, ref(13), min_interval=0.02)
    tokens = numbered_words(1000)
    await stream(streamer, tokens, delay=0.001)
    streamed = [m for m in fake.sent if m.chat_id == 13]
    assert len(streamed) == 2  # rolled over into a second message during the stream
    first_words = words(streamed[0].text)
    assert first_words and first_words == words("".join(tokens))[: len(first_words)]  # frozen on a boundary
    assert not set(first_words) & set(words(streamed[1].text))
    assert [shown_twice(s) for s in telegram_timeline(fake, 13) if shown_twice(s)] == []


async def test_streamer_final_shorter_than_stream_deletes_the_surplus_message(fake, adapter):
    streamer = EditStreamer(adapter, ref(14), min_interval=0.02)
    await stream(streamer, numbered_words(1000), delay=0.001)
    first, second = [m for m in fake.sent if m.chat_id == 14]
    ids = await streamer.finish(OutboundMessage(ref(14), "I couldn't find that in the help center."))
    assert ids == [str(first.message_id)]
    assert first.text == "I couldn't find that in the help center."
    assert second.deleted and not first.deleted


async def test_streamer_surplus_message_telegram_will_not_delete_is_blanked(fake, adapter):
    """Telegram lets a bot delete its messages for 48 hours only: past that, the surplus is edited to "—"."""
    streamer = EditStreamer(adapter, ref(19), min_interval=0.02)
    await stream(streamer, numbered_words(1000), delay=0.001)
    first, second = [m for m in fake.sent if m.chat_id == 19]
    fake.fail_next("deleteMessage", status=400, description="Bad Request: message can't be deleted")
    await streamer.finish(OutboundMessage(ref(19), "I couldn't find that in the help center."))
    assert second.text == SURPLUS_TEXT and not second.deleted


async def test_streamer_rate_limited_edit_waits_for_retry_after(fake, adapter):
    streamer = EditStreamer(adapter, ref(15), min_interval=0.05)
    fake.fail_next("editMessageText", status=429, retry_after=1)
    tokens = numbered_words(30)
    for token in tokens[:5]:
        await streamer.feed(token)
    await asyncio.sleep(0.1)
    for token in tokens[5:]:
        await streamer.feed(token)
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.1)
    edits = [c for c in chat_calls(fake, 15) if c.method.lower() == "editmessagetext"]
    assert len(edits) >= 2
    assert edits[1].at - edits[0].at >= 1.0  # the 429's retry_after was honoured, then streaming went on
    await streamer.finish(OutboundMessage(ref(15), "".join(tokens)))
    [message] = [m for m in fake.sent if m.chat_id == 15]
    assert words(message.text) == words("".join(tokens))


async def test_streamer_without_tokens_sends_the_reply_normally(fake, adapter):
    streamer = EditStreamer(adapter, ref(16), min_interval=INTERVAL)
    await streamer.close()
    assert not streamer.started
    ids = await streamer.finish(OutboundMessage(ref(16), "Hello from Acme!", reply_to="5"))
    [message] = [m for m in fake.sent if m.chat_id == 16]
    assert ids == [str(message.message_id)] and message.text == "Hello from Acme!" and message.reply_to == 5
    assert chat_calls(fake, 16)[0].method.lower() == "sendmessage" and len(chat_calls(fake, 16)) == 1


async def test_streamer_code_block_rollover_reopens_the_fence(fake, adapter):
    streamer = EditStreamer(adapter, ref(17), min_interval=0.02)
    code = "".join(f"\nline_{i:04d} = {i}" for i in range(400))  # about 6,000 characters of code
    # The reply opens with the code block: with a paragraph before it, the first cut falls between
    # the two while the block alone still fits, and whether it does depends on when a flush happens.
    tokens = ["```python", *code.splitlines(keepends=True), "\n```\n\nDone."]
    await stream(streamer, tokens, delay=0.001)
    streamed = [m for m in fake.sent if m.chat_id == 17]
    assert len(streamed) == 2
    assert any(e["type"] == "pre" for e in streamed[1].entities)  # still rendered as code after the cut
    lines = [set(re.findall(r"line_\d{4}", m.text)) for m in streamed]
    assert lines[0] and lines[1] and not lines[0] & lines[1]


async def test_a_cut_at_the_end_of_what_arrived_still_reopens_the_fence(fake, adapter):
    # The first flush sees a code block just over the limit that ends with a newline: the cut leaves
    # nothing but that newline, so the fence must be read from the text, not from a next part.
    streamer = EditStreamer(adapter, ref(18), min_interval=0.02)
    lines = [f"line_{i:04d} = {i}\n" for i in range(1000)]
    n = next(n for n in range(len(lines)) if len("```python\n" + "".join(lines[:n])) > streamer.budget)
    async def sent(count: int) -> list[Any]:
        for _ in range(300):
            if len(streamed := [m for m in fake.sent if m.chat_id == 18]) >= count:
                return streamed
            await asyncio.sleep(0.01)
        return streamed

    await streamer.feed("```python\n" + "".join(lines[:n]))
    await sent(1)
    await streamer.feed("".join(lines[n : n + 20]))
    streamed = await sent(2)
    await stream(streamer, ["```\n\nDone."])
    assert len(streamed) == 2
    assert all(any(e["type"] == "pre" for e in m.entities) for m in streamed)
    shown = [set(re.findall(r"line_\d{4}", m.text)) for m in streamed]
    assert shown[0] and shown[1] and not shown[0] & shown[1]


def test_streamer_for_needs_edits_and_stream_setting():
    class NoEdits:
        name = "whatsapp"
        capabilities = type("Caps", (), {"edits": False})()

    settings_on, settings_off = TelegramChannel(stream=True), TelegramChannel()
    tg = TelegramAdapter("demo", TelegramChannel(token=TOKEN))
    assert isinstance(streamer_for(tg, settings_on, ref(1)), EditStreamer)
    assert streamer_for(tg, settings_off, ref(1)) is None
    assert streamer_for(NoEdits(), settings_on, ref(1)) is None
    assert [EditStreamer.INTERVALS[name] for name in ("telegram", "slack", "discord")] == [1.0, 1.0, 1.0]
    assert EditStreamer(tg, ref(-100123)).min_interval == 3.0  # Telegram: 20 messages a minute in a group
    assert EditStreamer(tg, ref(123)).min_interval == 1.0


def test_compose_appends_a_markdown_sources_footer():
    text = compose("Plus costs $6 [1].", (Citation("help", "Plans", "https://x.test/p"),))
    assert text == "Plus costs $6 [1].\n\n**Sources:**\n1. [Plans](https://x.test/p)"
    assert compose("No sources.") == "No sources."


async def test_a_streamed_reply_ends_with_the_bots_sources_heading(fake, adapter):
    streamer = EditStreamer(adapter, ref(16), min_interval=0.02)
    await stream(streamer, ["El plan Plus ", "cuesta 6 $ [1]."])
    cited = (Citation("help", "Planes", "https://x.test/p"),)
    await streamer.finish(OutboundMessage(ref(16), "El plan Plus cuesta 6 $ [1].", citations=cited,
                                          sources_heading="Fuentes:"))
    [message] = [m for m in fake.sent if m.chat_id == 16]
    assert "\n\nFuentes:\n" in message.text and message.text.endswith("Planes") and "Sources" not in message.text


async def test_streamer_failed_final_edit_removes_the_draft_and_raises_for_the_outbox(fake, adapter):
    streamer = EditStreamer(adapter, ref(18), min_interval=0.02)
    await stream(streamer, numbered_words(20), delay=0.005)
    fake.fail_next("editMessageText", status=400, description="Bad Request: MESSAGE_ID_INVALID")
    with pytest.raises(ChannelSendError) as raised:
        await streamer.finish(OutboundMessage(ref(18), "The final answer."))
    assert raised.value.permanent
    [message] = [m for m in fake.sent if m.chat_id == 18]
    assert message.deleted  # the outbox resends the reply; the draft no longer shows its words
    assert streamer.finished
