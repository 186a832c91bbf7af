"""Discord adapter against a local fake Discord gateway websocket: connecting, intents and message delivery."""

from __future__ import annotations

import asyncio
import json

from channels.discord import DiscordAdapter
from gateway.models import InboundMessage
from tests.channels.discord_helpers import (  # noqa: F401 - `fake` fixture
    FIXTURES,
    GUILD,
    connected,
    fake_fixture,
    guild_message,
    settings_for,
    wait_for,
)
from tests.fakes.discord_api import BOT_USER_ID, FakeDiscord


async def test_start_connects_gateway_with_message_content_intent_and_delivers(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake))
    async with connected(adapter, fake) as delivered:
        assert fake.identifies[0]["token"] == "fake-bot-token"
        assert fake.identifies[0]["intents"] & (1 << 15)  # MESSAGE_CONTENT
        await fake.dispatch("MESSAGE_CREATE", guild_message("not for me", message_id="900000000000000020"))
        mention = guild_message(
            f"<@{BOT_USER_ID}> opening hours?", message_id="900000000000000021", mentions=[{"id": BOT_USER_ID}]
        )
        await fake.dispatch("MESSAGE_CREATE", mention)
        await wait_for(delivered, 1)
        assert [m.external_id for m in delivered] == ["900000000000000021"]
        assert delivered[0].text == "opening hours?" and delivered[0].conversation.workspace == GUILD
    assert adapter.client.is_closed()


async def test_on_message_fixture_payloads_via_parse_message_create(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        names = ["MessageCreate.Type0.json", "MessageCreate.Type19.json", "MessageCreate.Type6.json"]
        for name in names:
            payload = json.loads((FIXTURES / "discord4j_discord_json" / name).read_text())["d"]
            adapter.client._connection.parse_message_create(payload)
        me = {"id": BOT_USER_ID, "username": "me", "bot": True, "discriminator": "0", "avatar": None}
        own = guild_message("echo", message_id="900000000000000030", author=me)
        adapter.client._connection.parse_message_create(own)
        await wait_for(delivered, 3)
    assert [m.text for m in delivered] == [".ping", "cool.", "different message"]
    assert delivered[1].reply_to == "775214933398782002"
    assert {m.external_id for m in delivered} == {"732582724170285086", "779520963116400721", "123456789012345678"}


async def test_message_is_retried_into_the_inbox_while_storage_is_down(fake: FakeDiscord):
    # Discord never sends a MESSAGE_CREATE again: a storage outage must be waited out, not logged away.
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    attempts: list[str] = []
    stored = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        attempts.append(message.external_id)
        if len(attempts) < 3:
            raise ConnectionError("database is down")
        stored.set()

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        await fake.dispatch("MESSAGE_CREATE", guild_message("still there?", message_id="900000000000000040"))
        await asyncio.wait_for(stored.wait(), timeout=10)
    finally:
        await adapter.stop()
    assert attempts == ["900000000000000040"] * 3
