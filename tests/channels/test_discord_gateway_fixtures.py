"""Every captured Discord gateway dispatch and message object (tests/fixtures/payloads/discord) sent over the
fake gateway websocket, through discord.py's own parsing, into the adapter: what reaches the inbox (a message,
or an edit or deletion of one) or is dropped, and the connection still delivering afterwards. RECONNECT
and INVALID_SESSION are sent as captured too; HELLO is what the fake gateway opens every connection with."""

from __future__ import annotations

import asyncio
import json

import pytest

from channels.discord import DiscordAdapter
from tests.channels.discord_helpers import (  # noqa: F401 - `fake` fixture
    FIXTURES,
    connected,
    fake_fixture,
    guild_message,
    settings_for,
    wait_for,
)
from tests.fakes.discord_api import BOT_USER_ID, FakeDiscord

# file -> the dispatch it is sent as, and what the inbox gets: (text, only while held) of a message,
# "revision" for an edit or deletion, or None for nothing.
DISPATCHES = {
    "discord4j_discord_json/MessageCreate.Type0.json": ("MESSAGE_CREATE", (".ping", True)),  # no mention of us
    "discord4j_discord_json/MessageCreate.Type19.json": ("MESSAGE_CREATE", ("cool.", True)),  # a reply to another bot
    # Named for a pin (type 6), yet a type 0 message as captured: read as one (a real pin: below).
    "discord4j_discord_json/MessageCreate.Type6.json": ("MESSAGE_CREATE", ("different message", True)),
    "discord4j_discord_json/MessageDelete.json": ("MESSAGE_DELETE", "revision"),
    "discord4j_discord_json/MessageReactionAdd.json": ("MESSAGE_REACTION_ADD", None),
    "discord4j_discord_json/MessageUpdate.Embeds.json": ("MESSAGE_UPDATE", None),  # unreadable to discord.py: skipped
    "discord4j_discord_json/MessageUpdate.NoEmbeds.json": ("MESSAGE_UPDATE", "revision"),
    "discord4j_discord_json/rest_Message.Reply.json": ("MESSAGE_CREATE", ("cool.", False)),  # a DM
    "discord_api_docs/message_object_example.json": ("MESSAGE_CREATE", ("Supa Hot", False)),  # a DM
    "discord_api_docs/message_object_example_crossposted.json": ("MESSAGE_CREATE", None),
    "discord_api_docs/gateway_event_payload_envelope.json": ("GATEWAY_EVENT_NAME", None),
}
CONTROL = {"discord4j_discord_json/Hello.json", "discord_api_docs/gateway_hello.json",
           "discord_api_docs/gateway_invalid_session.json", "discord_api_docs/gateway_reconnect.json"}
INTERACTIONS = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json") if "interaction" in p.name.lower()}


def test_discord_every_fixture_is_a_dispatch_a_control_frame_or_an_interaction() -> None:
    every = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json")}
    assert every == set(DISPATCHES) | CONTROL | INTERACTIONS


@pytest.mark.parametrize("name", sorted(DISPATCHES))
async def test_discord_gateway_fixture_through_discord_py(fake: FakeDiscord, name: str) -> None:
    event, expected = DISPATCHES[name]
    payload = json.loads((FIXTURES / name).read_text())
    data = payload["d"] if "op" in payload else payload
    adapter = DiscordAdapter("support", settings_for(fake))
    async with connected(adapter, fake) as delivered:
        await fake.dispatch(event, data)
        after = guild_message("still listening", message_id="900000000000000077")
        await fake.dispatch("MESSAGE_CREATE", after)
        await wait_for(delivered, 1 if expected is None else 2)
    texts = [(m.text, m.only_while_held) for m in delivered if m.external_id != "900000000000000077"]
    assert [m.text for m in delivered if m.external_id == "900000000000000077"] == ["still listening"]  # goes on
    if expected is None:
        assert texts == []
    elif expected == "revision":
        [revision] = [m for m in delivered if m.external_id != "900000000000000077"]
        assert revision.revises == str(data["id"])
        assert revision.deleted == (event == "MESSAGE_DELETE")
    else:
        assert texts == [expected]


@pytest.mark.parametrize("name", ["discord_api_docs/gateway_reconnect.json", "discord_api_docs/gateway_invalid_session.json"])
async def test_discord_reconnect_or_invalid_session_frame_loses_no_later_message(fake: FakeDiscord, name: str) -> None:
    """Discord sends RECONNECT (op 7) to move a connection, and INVALID_SESSION (op 9) when a session ends:
    discord.py reconnects (resuming or identifying again), and messages sent after it still arrive."""
    frame = (FIXTURES / name).read_text()
    adapter = DiscordAdapter("support", settings_for(fake))
    async with connected(adapter, fake) as delivered:
        identified, started = len(fake.identifies), fake.sessions_started
        sockets = list(fake._sockets)
        for ws in sockets:
            await ws.send_str(frame)
        async with asyncio.timeout(30):  # the old socket closed, a new one opened, its RESUME or IDENTIFY handled
            while (not fake._sockets or set(map(id, fake._sockets)) & set(map(id, sockets))
                   or fake.sessions_started == started):
                await asyncio.sleep(0.02)
        await fake.dispatch("MESSAGE_CREATE", guild_message("after the reconnect", message_id="900000000000000078"))
        await wait_for(delivered, 1)
    assert [m.text for m in delivered] == ["after the reconnect"]
    assert len(fake.identifies) >= identified


async def test_discord_a_real_pin_notice_reaches_no_inbox(fake: FakeDiscord) -> None:
    """`MessageCreate.Type6.json` is labelled a pin but holds a type 0 message (`"type": 0`, text "different
    message"): the test above reads it as the ordinary message it is. A pin notice proper is that message as
    type 6 (CHANNEL_PINNED_MESSAGE), with no text, and naming the bot changes nothing: a system notice."""
    data = json.loads((FIXTURES / "discord4j_discord_json/MessageCreate.Type6.json").read_text())["d"]
    assert data["type"] == 0 and data["content"] == "different message"
    pin = {**data, "type": 6, "content": "", "mentions": [{"id": BOT_USER_ID, "username": "me", "discriminator": "0"}]}
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        await fake.dispatch("MESSAGE_CREATE", pin)
        await fake.dispatch("MESSAGE_CREATE", guild_message("still listening", message_id="900000000000000078"))
        await wait_for(delivered, 1)
    assert [m.external_id for m in delivered] == ["900000000000000078"]
