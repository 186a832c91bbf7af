"""Discord edits through the real app and the fake Discord: a server message edited to mention the bot, in a thread
discord.py does not hold (its guild unknown to it too: no GUILD_CREATE came for it)."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from channels.discord import DiscordAdapter
from storage.models import Conversation
from tests.fakes.discord_api import BOT_USER_ID, message_object, thread_object
from tests.gateway_channels.conftest import QUESTION, messages_in_chat, settle, settled_chat
from tests.gateway_channels.test_discord_e2e import discord_gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")
MENTION = {"id": BOT_USER_ID, "username": "acme", "discriminator": "0", "avatar": None, "bot": True}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with discord_gateway(tmp_path_factory.mktemp("discord-edits")) as env_:
        yield env_


def _edited_in_thread(fake, n: int) -> tuple[str, str, dict]:
    """(thread, guild, the MESSAGE_UPDATE's data): a member's message in a thread, edited to mention the bot."""
    thread, guild = f"16000000000000000{n}", f"17000000000000000{n}"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=f"16000000000000001{n}", guild_id=guild)
    member = {"id": f"13000000000000000{n}", "username": "bo", "discriminator": "0", "avatar": None}
    asked = message_object(message_id=f"15000000000000000{n}", channel_id=thread, content=f"<@{BOT_USER_ID}> {QUESTION}",
                           author=member, timestamp="2026-11-29T10:00:00+00:00", guild_id=guild)
    return thread, guild, {**asked, "edited_timestamp": "2026-11-29T10:00:09+00:00", "mentions": [MENTION]}


async def test_discord_message_edited_to_mention_the_bot_in_a_thread_is_the_threads_question(env):
    """The edit's thread look-up was asked only when discord.py knew the message's guild (its raw event's guild_id),
    so in a guild it does not hold the edit was stored as the member's own conversation, not the thread's."""
    client, services, fake = env
    reader = DiscordAdapter("acme", services.adapters[("acme", "discord")].settings)
    await reader.start(services._deliver_for("acme"))
    thread, guild, edited = _edited_in_thread(fake, 71)
    try:
        await asyncio.wait_for(reader.client.wait_until_ready(), timeout=10)
        await fake.dispatch("MESSAGE_UPDATE", edited)
        [question, _answer] = await settled_chat(services, channel="discord", chat=thread)
    finally:
        await reader.stop()
    async with services.sessions() as session:
        conversation = await session.get(Conversation, question.conversation_id)
    assert (conversation.workspace, conversation.thread) == (guild, thread)


async def test_discord_edit_waiting_for_its_thread_look_up_stays_before_the_deletion_after_it(env):
    """An edit's thread look-up ran before the edit took its channel's turn: the member's deletion right after it went
    in first, found nothing to take back, and the edit, a question of its own then, was answered."""
    client, services, fake = env
    reader = DiscordAdapter("acme", services.adapters[("acme", "discord")].settings)
    await reader.start(services._deliver_for("acme"))
    thread, guild, edited = _edited_in_thread(fake, 72)
    fake.delays[f"/channels/{thread}"] = 1.5  # the look-up is slow: the deletion comes meanwhile
    try:
        await asyncio.wait_for(reader.client.wait_until_ready(), timeout=10)
        await fake.dispatch("MESSAGE_UPDATE", edited)
        await fake.dispatch("MESSAGE_DELETE", {"id": edited["id"], "channel_id": thread, "guild_id": guild})
        await settled_chat(services, channel="discord", chat=thread, count=1)
        await settle(services=services)
    finally:
        await reader.stop()
        fake.delays.pop(f"/channels/{thread}")
    stored = await messages_in_chat(services, channel="discord", chat=thread)
    assert [m.status for m in stored] == ["ignored"] and fake.channel_messages(thread) == [], [m.text for m in stored]
