"""An operator's reply to a Discord member near the 2,000-character limit, then their edit of it: the edit
(`render`, then `edit(rendered=True)` on each message, as `gateway/operators/slack_edits.py` does) must find
the parts the send posted, whether the reply went to the channel or as an `/ask`'s follow-up."""

from __future__ import annotations

import json

import pytest

from channels.discord import MAX_LENGTH, DiscordAdapter
from gateway.models import ConversationRef, OutboundMessage
from tests.channels import discord_helpers as helpers
from tests.channels.discord_helpers import adapter_fixture, fake_fixture  # noqa: F401 - the fixtures
from tests.fakes.discord_api import FakeDiscord

MEMBER = "900000000000000003"
# Each ends its text: a mention of someone else in it, emoji (one character each, two UTF-16 units), a code block.
ENDINGS = ["", " ask <@900000000000000077> too", " 😀👍🏽🇫🇷", "\n```py\nprint('ok')\n```"]


def _reply(size: int, ending: str, member: str) -> str:
    """A reply that is `size` characters long with `member`'s mention in front of it."""
    words = " ".join(f"step {i} done." for i in range(400))
    room = size - len(f"<@{member}> ") - len(ending)
    return words[:room].rstrip() + "x" * (room - len(words[:room].rstrip())) + ending


async def _edited_alike(fake: FakeDiscord, adapter: DiscordAdapter, conversation: ConversationRef, text: str) -> None:
    ids = await adapter.send(OutboundMessage(conversation=conversation, text=text, addressee="Ann"))
    sent = [fake.messages[i]["content"] for i in ids]
    assert all(len(content) <= MAX_LENGTH for content in sent)
    parts = adapter.render(OutboundMessage(conversation=conversation, text=text, addressee="Ann"))
    assert len(parts) == len(ids), "the edit would not be passed on: another number of parts than was sent"
    for provider_id, part in zip(ids, parts):
        await adapter.edit(conversation, provider_id, part, rendered=True)
    assert [fake.messages[i]["content"] for i in ids] == sent  # the same text edited in: each message unchanged


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("size", [1999, 2000, 2001])
async def test_discord_edit_of_an_operators_followup_near_the_limit_finds_the_parts_sent(
        fake: FakeDiscord, adapter: DiscordAdapter, size: int, ending: str):
    """The follow-up was split at 2,000 characters without the mention, the edit with it in front: a reply that
    fit one follow-up but was 2,001 characters with the mention was one part to the send and two to the edit,
    so the edit was never passed on."""
    (question,) = adapter.parse(helpers.signed(json.dumps(helpers.ask_interaction("Refund?")).encode())).messages
    member = question.conversation.member
    text = _reply(size, ending, member)
    assert len(f"<@{member}> {text}") == size
    await _edited_alike(fake, adapter, question.conversation, text)


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("size", [1999, 2000, 2001])
async def test_discord_edit_of_an_operators_channel_message_near_the_limit_finds_the_parts_sent(
        fake: FakeDiscord, adapter: DiscordAdapter, size: int, ending: str):
    conversation = ConversationRef(channel="discord", workspace=helpers.GUILD, chat=helpers.CHANNEL,
                                   thread=f"member:{MEMBER}")
    await _edited_alike(fake, adapter, conversation, _reply(size, ending, MEMBER))
