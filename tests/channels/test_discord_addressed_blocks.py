"""Discord: a message addressed to a member (`<@member>` in front) whose text starts with block Markdown.

Discord reads a heading, a list, a block quote or a code fence only at the start of a line: with the mention
on the same line, an operator's "## Hours" showed as typed, and a long code block was no fence to the
splitter, so its parts were cut without closing and reopening it."""

from __future__ import annotations

import json
import time

import pytest

from channels.discord import MAX_LENGTH, DiscordAdapter
from gateway.models import ConversationRef, OutboundMessage
from storage.message_meta import inbound_meta
from tests.channels.discord_helpers import (  # noqa: F401 - `adapter`, `fake` fixtures
    CHANNEL,
    GUILD,
    adapter_fixture,
    ask_interaction,
    fake_fixture,
    settings_for,
    signed,
)
from tests.fakes.discord_api import FakeDiscord

MEMBER = "900000000000000003"
ADDRESSED = ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL, thread=f"member:{MEMBER}")



@pytest.mark.parametrize("text", ["## Hours\nWe open at 9.", "- Mon: 9\n- Tue: 9", "> You wrote: hi",
                                  "1. Open settings\n2. Save", "```\nls\n```", "-# small print"])
def test_a_body_starting_with_a_block_puts_the_mention_on_its_own_line(adapter: DiscordAdapter, text: str):
    [chunk] = adapter.render(OutboundMessage(conversation=ADDRESSED, text=text, addressee="Sam"))
    assert chunk == f"<@{MEMBER}>\n{text}"


def test_a_body_starting_with_prose_keeps_the_mention_in_front(adapter: DiscordAdapter):
    [chunk] = adapter.render(OutboundMessage(conversation=ADDRESSED, text="**Hi**, Sam here.\n- a", addressee="Sam"))
    assert chunk == f"<@{MEMBER}> **Hi**, Sam here.\n- a"


def test_a_long_code_block_first_in_an_addressed_message_is_closed_and_reopened(adapter: DiscordAdapter):
    code = "\n".join(f"step_{i} = run(value_{i})  # a comment" for i in range(90))
    chunks = adapter.render(OutboundMessage(conversation=ADDRESSED, text=f"```python\n{code}\n```", addressee="Sam"))
    assert len(chunks) == 2 and all(len(c) <= MAX_LENGTH for c in chunks)
    assert chunks[0].startswith(f"<@{MEMBER}>\n```python\nstep_0 ") and chunks[0].endswith("\n```")
    assert chunks[1].startswith("```python\nstep_") and chunks[1].endswith("step_89 = run(value_89)  # a comment\n```")


async def test_an_edit_of_a_late_ask_post_starting_with_a_list_keeps_the_mention_on_its_own_line(
        fake: FakeDiscord, adapter: DiscordAdapter):
    before = DiscordAdapter("support", settings_for(fake))
    (question,) = before.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    await before.stop()
    expired = {**inbound_meta(question)["interaction"], "expires_at": time.time() - 1}  # late: to the channel
    ask = question.conversation
    (sent,) = await adapter.send(OutboundMessage(conversation=ask, text="Thinking", reply_to=question.external_id,
                                                 interaction=expired))
    assert fake.messages[sent]["content"] == f"<@{ask.member}> Thinking"
    await adapter.edit(ask, sent, "- Mon: 9\n- Tue: 9")
    assert fake.messages[sent]["content"] == f"<@{ask.member}>\n- Mon: 9\n- Tue: 9"


async def test_an_operators_block_message_sent_as_an_ask_followup_names_no_one(fake: FakeDiscord,
                                                                              adapter: DiscordAdapter):
    """Sent as the interaction's follow-up, which names no one, as is the edit relayed of it."""
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    (sent,) = await adapter.send(OutboundMessage(conversation=question.conversation, text="## Hours", addressee="Ann"))
    assert fake.messages[sent]["content"] == "## Hours"
    [part] = adapter.render(OutboundMessage(conversation=question.conversation, text="- 9 to 6", addressee="Ann"))
    await adapter.edit(question.conversation, sent, part, rendered=True)
    assert fake.messages[sent]["content"] == "- 9 to 6"
