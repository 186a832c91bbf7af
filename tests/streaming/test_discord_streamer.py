"""EditStreamer with the real DiscordAdapter (discord.py) against the local fake Discord REST API."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest

from channels.discord import DiscordAdapter
from channels.discord_followups import Interactions
from gateway.delivery.streaming import EditStreamer
from gateway.models import ConversationRef, OutboundMessage
from storage.message_meta import inbound_meta
from tests.channels.discord_helpers import ask_interaction, settings_for, signed
from tests.fakes.discord_api import APPLICATION_ID, FakeDiscord
from tests.streaming.conftest import numbered_words, words

CHANNEL = "900000000000000101"


@pytest.fixture
async def fake() -> Any:
    server = await FakeDiscord().start()
    yield server
    await server.close()


@pytest.fixture
async def adapter(fake: FakeDiscord) -> Any:
    instance = DiscordAdapter("support", settings_for(fake, stream=True))
    yield instance
    await instance.stop()


async def test_discord_streamer_rolls_over_at_2000_chars_and_edits_into_the_final_reply(fake, adapter):
    conversation = ConversationRef(channel="discord", chat=CHANNEL)
    streamer = EditStreamer(adapter, conversation, min_interval=0.02)
    tokens = numbered_words(450)  # about 2,700 characters: two Discord messages
    for token in tokens:
        await streamer.feed(token)
        await asyncio.sleep(0.002)
    await streamer.close()
    streamed = fake.channel_messages(CHANNEL)
    assert len(streamed) == 2 and fake.received("PATCH", streamed[0]["id"])  # frozen by an edit
    assert not set(words(streamed[0]["content"])) & set(words(streamed[1]["content"]))
    final = "".join(tokens) + "\n\nThat is all."
    ids = await streamer.finish(OutboundMessage(conversation, final))
    messages = fake.channel_messages(CHANNEL)
    assert ids == [m["id"] for m in messages] and len(messages) == 2  # edited in place, nothing re-sent
    assert [w for m in messages for w in words(m["content"])] == words(final)
    assert messages[-1]["content"].endswith("That is all.")
    assert all(len(m["content"]) <= 2000 for m in messages)


@pytest.mark.parametrize("restarted", [False, True])
async def test_discord_streamer_answers_an_ask_with_follow_ups_it_edits_through_the_interaction(fake, adapter,
                                                                                               restarted):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    stored = inbound_meta(question).get("interaction")
    if restarted:  # answered by a new process, which knows the interaction only as stored with the question
        adapter._interactions = Interactions()
    streamer = EditStreamer(adapter, question.conversation, reply_to=question.external_id, min_interval=0.02,
                            interaction=stored)
    tokens = numbered_words(450)  # about 2,700 characters: two Discord messages
    for token in tokens:
        await streamer.feed(token)
        await asyncio.sleep(0.002)
    await streamer.close()
    final = "".join(tokens) + "\n\nThat is all."
    ids = await streamer.finish(OutboundMessage(question.conversation, final, reply_to=question.external_id))
    shown = [fake.messages[i] for i in ids]
    assert [w for m in shown for w in words(m["content"])] == words(final) and len(shown) == 2
    # Edited through the interaction: the channel's endpoint needs the bot to see the channel (the fake
    # answered 404, the streamed text stayed and the answer failed), and the second part is a follow-up too.
    assert all(m.get("interaction_token") == "A_UNIQUE_TOKEN" for m in shown)
    assert fake.received("PATCH", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN/messages/{ids[0]}")
    assert not fake.channel_messages(question.conversation.chat)
    assert not [r for r in fake.requests if r.path.startswith("/api/v10/channels/")]


async def test_a_late_ask_streamed_to_the_channel_keeps_its_mention_of_the_member(fake, adapter):
    # Past its 15 minutes an `/ask` is answered in the channel, addressed to the member who asked (it replies to
    # no message); streamed, each edit put the text alone in place, so the answer ended up addressed to no one.
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    expired = {**inbound_meta(question)["interaction"], "expires_at": time.time() - 1}
    adapter._interactions = Interactions()  # answered by a new process, past the token's life
    member = question.conversation.member
    streamer = EditStreamer(adapter, question.conversation, reply_to=question.external_id, min_interval=0.02,
                            interaction=expired)
    for token in re.findall(r"\S+\s*", "We open at nine and close at five on weekdays."):
        await streamer.feed(token)
        await asyncio.sleep(0.03)
    await streamer.close()
    final = "We open at nine and close at five on weekdays, and at noon on Saturdays."
    ids = await streamer.finish(OutboundMessage(question.conversation, final, reply_to=question.external_id,
                                                interaction=expired))
    [shown] = fake.channel_messages(question.conversation.chat)
    assert ids == [shown["id"]] and fake.received("PATCH", shown["id"])  # streamed: edited into place
    assert shown["content"] == f"<@{member}> {final}"
