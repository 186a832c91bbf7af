"""Discord adapter against the fake gateway: the Message Content Intent requested but not enabled (close code 4014)."""

from __future__ import annotations

import asyncio

from channels.discord import DiscordAdapter
from tests.channels.discord_helpers import (  # noqa: F401 - `fake` fixture
    connected,
    fake_fixture,
    guild_message,
    settings_for,
    wait_for,
)
from tests.fakes.discord_api import FakeDiscord


async def test_message_content_intent_not_enabled_is_said_plainly_and_connecting_goes_on(fake: FakeDiscord, caplog):
    """4014: the Message Content Intent is requested but not enabled in the Developer Portal. discord.py raises
    PrivilegedIntentsRequired ("Shard ID None is requesting privileged intents… consider disabling the privileged
    intents") without closing the client: it was logged as discord.gateway_failed with a traceback on every try and
    /readyz said "reconnecting", naming neither the intent nor where to turn it on. Once it is turned on, the next
    try connects: no restart needed."""
    fake.identify_close_code = 4014
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    with caplog.at_level("INFO", logger="channels.discord"):
        async with connected(adapter, fake) as delivered:
            async with asyncio.timeout(10):
                while "Message Content Intent" not in adapter.connection_status:
                    await asyncio.sleep(0.02)
            assert "Privileged Gateway Intents" in adapter.connection_status, adapter.connection_status
            lines = [r for r in caplog.records if r.name == "channels.discord" and r.levelname == "ERROR"]
            assert [r.getMessage() for r in lines] == ["discord.message_content_intent_missing"]
            assert lines[0].exc_info is None and "Developer Portal" in lines[0].__dict__["error"]
            assert not [r for r in caplog.records if r.getMessage() == "discord.gateway_failed"]
            fake.identify_close_code = None  # turned on in the portal: the next try connects
            fake.identifies.clear()
            await fake.wait_identified(timeout=30)
            async with asyncio.timeout(10):
                while adapter.connection_status != "connected":
                    await asyncio.sleep(0.02)
            await fake.dispatch("MESSAGE_CREATE", guild_message("hello again", message_id="900000000000000090"))
            await wait_for(delivered, 1)
    assert [m.text for m in delivered] == ["hello again"]
