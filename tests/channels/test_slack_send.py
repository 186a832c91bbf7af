"""Slack adapter against a local fake Slack: sending, splitting, rate limits, retries, edits and reconciliation."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from structlog.testing import capture_logs

from channels.slack import SLACK_MESSAGE_LIMIT, SlackAdapter
from gateway.delivery.streaming import EditStreamer
from gateway.errors import ChannelSendError, RecipientUnreachable
from gateway.models import Citation, ConversationRef, OutboundMessage
from gateway.settings import SlackChannel
from tests.channels.slack_helpers import SECRET, Sleeps, fake_fixture, make_adapter  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, FakeSlack

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


async def test_slack_send_lists_citations_under_the_bots_sources_heading(fake: FakeSlack):
    citations = (Citation("kb/hours.md", "Horario", "https://kb.example.com/hours"),)
    await make_adapter(fake).send(OutboundMessage(CONV, "Abrimos a las 9.", citations=citations,
                                                  sources_heading="Fuentes:"))
    (call,) = fake.calls_to("chat.postMessage")
    assert call.params["text"] == "Abrimos a las 9.\n\n*Fuentes:*\n1. <https://kb.example.com/hours|Horario>"


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


@pytest.mark.parametrize("header", ["soon", "nan", "-3", "inf", ""])
async def test_slack_send_malformed_retry_after_waits_one_second(fake: FakeSlack, header: str):
    """A `Retry-After` that is no number of seconds failed the send with a ValueError (or waited for ever): 1 s it is."""
    sleeps = Sleeps()
    fake.fail("chat.postMessage", status=429, retry_after=header)
    await make_adapter(fake, sleeps=sleeps).send(OutboundMessage(CONV, "hello"))
    assert sleeps == [1.0] and len(fake.posted()) == 1


async def test_slack_send_long_retry_after_surfaces_to_worker(fake: FakeSlack):
    fake.fail("chat.postMessage", status=429, retry_after=120)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake).send(OutboundMessage(CONV, "hello"))
    assert info.value.retry_after == 120 and not info.value.permanent
    assert fake.posted() == []


async def test_slack_rate_limits_are_waited_in_place_up_to_5_s_in_all(fake: FakeSlack):
    """Past that the reply goes back to the outbox, which parks the conversation: the worker's slot is
    free for other channels (a workspace-wide 429 with Retry-After 25 held every slot for its wait)."""
    sleeps = Sleeps()
    fake.fail("chat.postMessage", status=429, retry_after=4, times=2)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake, sleeps=sleeps).send(OutboundMessage(CONV, "hello"))
    assert sleeps == [4.0] and info.value.rate_limited and info.value.retry_after == 4
    assert fake.count("chat.postMessage") == 2 and fake.posted() == []


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


async def test_slack_account_inactive_is_this_bots_token_said_in_readyz_not_the_recipients_fault(fake: FakeSlack):
    """`account_inactive` means the token is for a deleted workspace or app: it was a `RecipientUnreachable`,
    blamed on each customer in turn, while /readyz said all was well."""
    adapter = make_adapter(fake)
    assert adapter.connection_status is None
    fake.fail("chat.postMessage", error="account_inactive", times=2)
    with capture_logs() as logs:
        for _ in range(2):
            with pytest.raises(ChannelSendError) as info:
                await adapter.send(OutboundMessage(CONV, "hello"))
            assert not isinstance(info.value, RecipientUnreachable) and info.value.permanent
    assert "this bot's token" in str(info.value)
    assert adapter.connection_status.startswith("account_inactive from chat_postMessage: Slack refuses this bot's token")
    assert [e["log_level"] for e in logs if e["event"] == "slack.token_gone"] == ["warning"]  # once, not per reply
    await adapter.send(OutboundMessage(CONV, "hello"))  # a token that works again: ready again
    assert adapter.connection_status is None


async def test_slack_api_base_without_trailing_slash_works(fake: FakeSlack):
    adapter = make_adapter(api_base=fake.api_base.rstrip("/"))
    assert await adapter.send(OutboundMessage(CONV, "hi")) == [fake.posted()[0]["ts"]]


async def test_slack_send_bad_token_is_permanent(fake: FakeSlack):
    adapter = SlackAdapter("demo", SlackChannel(bot_token="xoxb-wrong", signing_secret=SECRET, api_base=fake.api_base))
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(OutboundMessage(CONV, "hello"))
    assert info.value.permanent and adapter.connection_status.startswith("invalid_auth")


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


async def test_a_streamed_code_answer_whose_escapes_outgrow_the_limit_is_still_edited_into_place(fake: FakeSlack):
    """mrkdwn escapes & < > as &amp; &lt; &gt;: a streamed C++ answer within the streamer's budget (Markdown) was over
    3,000 once escaped, so each edit was refused as "longer than one Slack message", the final replacement failed
    with a permanent error, the streamed message was removed, and the customer never got the answer. The limit is
    on what Slack shows (an escape is one character); Slack takes up to 40,000 in `text`."""
    conv = ConversationRef("slack", "T111", "D111", "")
    code = "\n".join(f"if (a < b && c > d) {{ x <<= {i}; }}" for i in range(75))
    text = f"Use this:\n\n```cpp\n{code}\n```"
    streamer = EditStreamer(make_adapter(fake), conv, min_interval=0)
    for start in range(0, len(text), 200):
        await streamer.feed(text[start:start + 200])
        await asyncio.sleep(0.02)
    ids = await streamer.finish(OutboundMessage(conv, text))
    (post,) = fake.posted()
    assert ids == [post["ts"]] and fake.count("chat.postMessage") == 1
    final = fake.calls_to("chat.update")[-1].params
    assert final["ts"] == post["ts"] and final["text"].count("&lt;") == 3 * 75 and len(final["text"]) > SLACK_MESSAGE_LIMIT
    assert len(final["text"].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")) <= SLACK_MESSAGE_LIMIT


async def test_slack_send_typing_is_a_no_op(fake: FakeSlack):
    await make_adapter(fake).send_typing(CONV)
    assert fake.calls == []


# ---- reconciling a retry with what Slack already shows -----------------------------------------


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


async def test_slack_retry_in_a_new_process_resumes_from_the_outbox_record_without_history(fake: FakeSlack):
    fake.fail("conversations.replies", error="missing_scope")
    text = "\n\n".join(f"Part {i}. " + "x " * 1400 for i in range(3))
    fake.fail_call("chat.postMessage", 2, status=500)  # part 1 landed, part 2 did not
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake).send(OutboundMessage(CONV, text, idempotency_key="m9", attempt=1))
    assert info.value.sent_ids == [fake.posted()[0]["ts"]]  # type: ignore[attr-defined]  # the outbox stores it
    retry = OutboundMessage(CONV, text, idempotency_key="m9", attempt=2,
                            delivered_parts=tuple(info.value.sent_ids))  # type: ignore[attr-defined]
    ids = await make_adapter(fake).send(retry)  # a new adapter: nothing in memory, history unreadable
    assert [p["text"].split(".")[0] for p in fake.posted()] == ["Part 0", "Part 1", "Part 2"]
    assert ids == [p["ts"] for p in fake.posted()]


async def test_slack_first_attempt_does_not_read_history(fake: FakeSlack):
    await make_adapter(fake).send(OutboundMessage(CONV, "hello", idempotency_key="m8", attempt=1))
    assert fake.count("conversations.replies") == fake.count("conversations.history") == 0


async def test_slack_retry_does_not_take_another_apps_post_for_a_landed_part(fake: FakeSlack):
    # Another app in the channel (a second deployment of the gateway, whose message ids are its own)
    # posted metadata naming the same reply and part: only this app's own posts are its landed parts.
    fake.fail_call("chat.postMessage", 1, status=500)
    adapter = make_adapter(fake)
    adapter.bot_user_id = BOT_USER_ID  # learned by auth.test at start
    with pytest.raises(ChannelSendError):
        await adapter.send(OutboundMessage(CONV, "hello", idempotency_key="m5", attempt=1))
    fake.say(CONV.chat, "staging says hi", user="USTAGING", bot_id="BSTAGING", thread_ts=CONV.thread,
             metadata={"event_type": "gateway_reply", "event_payload": {"reply": "m5", "part": 0}})
    fake.say(CONV.chat, "odd", user="USTAGING", bot_id="BSTAGING", thread_ts=CONV.thread,
             metadata={"event_type": "gateway_reply", "event_payload": {"reply": "m5", "part": "first"}})
    ids = await adapter.send(OutboundMessage(CONV, "hello", idempotency_key="m5", attempt=2))
    assert [p["text"] for p in fake.posted()] == ["hello"] and ids == [fake.posted()[0]["ts"]]


async def test_slack_retry_whose_history_look_up_is_rate_limited_waits_instead_of_posting_again(fake: FakeSlack):
    """conversations.replies / .history are rate limited hard (Tier 3, and 1 a minute for apps outside the Marketplace):
    a 429 there was taken for "history cannot be read", and every part was posted again, the landed ones twice.
    A short wait is waited out in place; a long one sends the reply back to the outbox with its retry_after."""
    text = "\n\n".join(f"Part {i}. " + "x " * 1400 for i in range(2))
    fake.fail_call("chat.postMessage", 2, status=500, landed=True)  # part 1 landed, unknown to the adapter
    with pytest.raises(ChannelSendError):
        await make_adapter(fake).send(OutboundMessage(CONV, text, idempotency_key="m61", attempt=1))
    assert len(fake.posted()) == 2
    fake.fail("conversations.replies", status=429, retry_after=60)
    with pytest.raises(ChannelSendError) as info:
        await make_adapter(fake).send(OutboundMessage(CONV, text, idempotency_key="m61", attempt=2))
    assert info.value.rate_limited and info.value.retry_after == 60 and not info.value.permanent
    assert len(fake.posted()) == 2  # nothing posted blindly
    sleeps = Sleeps()
    fake.fail("conversations.replies", status=429, retry_after=2)
    ids = await make_adapter(fake, sleeps=sleeps).send(OutboundMessage(CONV, text, idempotency_key="m61", attempt=3))
    assert sleeps == [2.0] and [p["text"].split(".")[0] for p in fake.posted()] == ["Part 0", "Part 1"]
    assert ids == [p["ts"] for p in fake.posted()]


async def test_slack_retry_in_a_long_thread_finds_the_part_that_landed_after_the_question(fake: FakeSlack):
    """conversations.replies lists a thread oldest first, 200 at most: in a thread of more than 200 replies before the
    question, the parts that had landed were never in the page read, and were posted again."""
    for n in range(205):
        fake.say(CONV.chat, f"chatter {n}", thread_ts=CONV.thread)
    question = fake.say(CONV.chat, "how much is it?", user="U0CUSTOMER", thread_ts=CONV.thread)
    text = "\n\n".join(f"Part {i}. " + "x " * 1400 for i in range(2))
    fake.fail_call("chat.postMessage", 1, status=500, landed=True)  # part 0 landed, unknown to the adapter
    reply = OutboundMessage(CONV, text, reply_to=question, idempotency_key="m71", attempt=1)
    with pytest.raises(ChannelSendError):
        await make_adapter(fake).send(reply)
    ids = await make_adapter(fake).send(dataclasses.replace(reply, attempt=2))
    assert [p["text"].split(".")[0] for p in fake.posted()] == ["Part 0", "Part 1"]
    assert ids == [p["ts"] for p in fake.posted()]
    assert fake.calls_to("conversations.replies")[-1].params["oldest"] == question
