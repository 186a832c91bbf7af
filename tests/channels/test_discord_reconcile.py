"""A Discord send retried after Discord stopped checking its nonce finds what the lost attempt posted."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.errors import ChannelSendError
from gateway.models import ConversationRef, OutboundMessage
from tests.channels.discord_helpers import (  # noqa: F401 - `adapter`, `fake`
    CHANNEL,
    GUILD,
    adapter_fixture,
    fake_fixture,
)

QUESTION = "900000000000000010"



def _reply(text: str, *, attempt: int = 1, reply_to: str = QUESTION) -> OutboundMessage:
    return OutboundMessage(conversation=ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL), text=text,
                           reply_to=reply_to, idempotency_key="m7", attempt=attempt)


async def test_a_post_whose_answer_was_lost_is_not_posted_again_after_the_nonce_window(fake, adapter):
    # Discord posts the answer, the connection drops before its answer arrives, and the outbox's retry
    # comes after Discord stopped checking the nonce (more failures, a paused channel, a restart): the
    # customer got the answer twice.
    fake.nonce_ttl = 0
    fake.drop_next("POST", f"/channels/{CHANNEL}/messages")
    first = _reply("Our plans start at 9 dollars a month.")
    with pytest.raises(ChannelSendError):
        await adapter.send(first)
    (posted,) = fake.channel_messages(CHANNEL)
    ids = await adapter.send(dataclasses.replace(first, attempt=2))
    assert ids == [posted["id"]] and len(fake.channel_messages(CHANNEL)) == 1


async def test_the_same_text_answering_another_question_is_not_taken_for_the_lost_post(fake, adapter):
    # The bot gave the same answer to someone else's question in the channel since: it is not this reply's.
    fake.nonce_ttl = 0
    await adapter.send(_reply("Yes.", reply_to="900000000000000011"))
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=503, body={"message": "busy", "code": 0})
    with pytest.raises(ChannelSendError):
        await adapter.send(_reply("Yes."))
    ids = await adapter.send(_reply("Yes.", attempt=2))
    assert len(fake.channel_messages(CHANNEL)) == 2 and ids == [fake.channel_messages(CHANNEL)[-1]["id"]]


async def test_a_lost_chunk_starting_with_an_indented_line_is_found_though_discord_trimmed_it(fake, adapter):
    # Discord trims a message's content, so a later chunk starting with an indented paragraph never matched
    # its own post in the channel and was posted a second time.
    fake.nonce_ttl = 0
    fake.drop_next("POST", f"/channels/{CHANNEL}/messages", after=1)
    first = _reply("Our plans are listed below in detail. " * 52 + "\n\n  The rest follows here.")
    with pytest.raises(ChannelSendError):
        await adapter.send(first)
    posted = fake.channel_messages(CHANNEL)
    assert len(posted) == 2 and posted[1]["content"] == "The rest follows here."
    ids = await adapter.send(dataclasses.replace(first, attempt=2))
    assert ids == [m["id"] for m in posted] and len(fake.channel_messages(CHANNEL)) == 2


async def test_two_replies_with_the_same_text_are_both_posted_within_the_nonce_window(fake, adapter):
    # An operator answers "Thanks, one moment." twice in a few minutes (two outbox messages, neither replying
    # to a message): the nonce, made of the text and the conversation alone, was the same, so Discord returned
    # the first post for the second and the member never saw it, though the outbox marked it sent.
    dm = ConversationRef(channel="discord", chat=CHANNEL)
    first = await adapter.send(OutboundMessage(conversation=dm, text="Thanks, one moment.", idempotency_key="m1"))
    second = await adapter.send(OutboundMessage(conversation=dm, text="Thanks, one moment.", idempotency_key="m2"))
    assert first != second and len(fake.channel_messages(CHANNEL)) == 2


async def test_a_retry_whose_history_read_is_rate_limited_goes_back_to_the_outbox_and_posts_nothing(fake, adapter):
    # A 429 on the history read was taken for "history cannot be read", and the chunk was posted a second time.
    fake.nonce_ttl = 0
    fake.drop_next("POST", f"/channels/{CHANNEL}/messages")
    first = _reply("Our plans start at 9 dollars a month.")
    with pytest.raises(ChannelSendError):
        await adapter.send(first)
    (posted,) = fake.channel_messages(CHANNEL)
    fake.rate_limit_next("GET", f"/channels/{CHANNEL}/messages", retry_after=30)
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(dataclasses.replace(first, attempt=2))
    assert info.value.rate_limited and info.value.retry_after == 30 and not info.value.permanent
    assert len(fake.channel_messages(CHANNEL)) == 1
    ids = await adapter.send(dataclasses.replace(first, attempt=3))
    assert ids == [posted["id"]] and len(fake.channel_messages(CHANNEL)) == 1
