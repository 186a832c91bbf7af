"""Discord `/ask` answered after a restart: the interaction's token comes back from the stored message."""

from __future__ import annotations

import json
import time

from channels.discord import DiscordAdapter
from gateway.models import OutboundMessage
from storage.message_meta import inbound_meta
from tests.channels.discord_helpers import ask_interaction, fake_fixture, settings_for, signed  # noqa: F401 - fixture
from tests.fakes.discord_api import APPLICATION_ID, INTERACTION_CHANNEL_ID, FakeDiscord


async def test_an_ask_answered_after_a_restart_still_goes_to_its_followups(fake: FakeDiscord):
    before = DiscordAdapter("support", settings_for(fake))
    (question,) = before.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    await before.stop()
    stored = inbound_meta(question)["interaction"]  # as the inbox stores it with the message
    assert stored["token"] == "A_UNIQUE_TOKEN" and stored["application_id"] == APPLICATION_ID
    assert "token" not in question.raw and "A_UNIQUE_TOKEN" not in repr(OutboundMessage(
        conversation=question.conversation, text="", interaction=stored))
    after = DiscordAdapter("support", settings_for(fake))  # a new process: nothing in memory
    try:
        ask = question.conversation
        # The streamed answer's first part, then a later one (no reply_to): both went to the channel.
        await after.send(OutboundMessage(conversation=ask, text="Part 1.", reply_to=question.external_id,
                                         interaction=stored))
        await after.send(OutboundMessage(conversation=ask, text="Part 2."))
        expired = {**stored, "expires_at": time.time() - 1}  # past its 15 minutes: the channel, as before
        await after.send(OutboundMessage(conversation=ask, text="Late.", reply_to=question.external_id,
                                         interaction=expired))
    finally:
        await after.stop()
    assert [m["content"] for m in fake.channel_messages(INTERACTION_CHANNEL_ID)] == ["Part 1.", "Part 2."]
    assert len(fake.received("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")) == 2
    # Late, in a shared channel: addressed to the member who asked (the interaction is no message to reply to).
    [late] = fake.channel_messages(ask.chat)
    assert late["content"] == f"<@{ask.member}> Late." and "message_reference" not in late
    [posted] = fake.received("POST", f"/channels/{ask.chat}/messages")
    assert posted.json["allowed_mentions"]["users"] == [int(ask.member)] and posted.json["allowed_mentions"]["parse"] == []
