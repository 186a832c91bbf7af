"""Every third-party Discord HTTP interaction (tests/fixtures/payloads/discord) through the real app's
interactions endpoint, Ed25519-signed for real: each is answered at once (Discord waits 3 s) with the
response its type calls for, pings no one, and stores nothing. (The gateway dispatches among the
fixtures reach the app through discord.py: tests/channels/test_discord_gateway.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.gateway_channels.conftest import count_messages, settle
from tests.gateway_channels.test_discord_e2e import USA_ASK, env, post  # noqa: F401 - `env` fixture

ASYNC = pytest.mark.asyncio(loop_scope="module")  # the module's one app (not on the sync table check)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "discord"
INTERACTIONS = sorted(p for p in FIXTURES.rglob("*.json")
                      if not ({"op", "author"} & set(json.loads(p.read_text()))))
EXPECTED = {  # file name -> the interaction response Discord gets
    "interaction_application_command_message_context_menu.json": "use /ask",
    "interaction_application_command_slash_chat_input.json": "use /ask",
    "interaction_application_command_user_context_menu.json": "use /ask",
    "interaction_autocomplete_partial.json": {"type": 8, "data": {"choices": []}},
    "interaction_application_command_minimal.json": "use /ask",
    "interaction_autocomplete_minimal.json": {"type": 8, "data": {"choices": []}},
    "interaction_message_component_button_minimal.json": "use /ask",
    "interaction_ping.json": {"type": 1},
}
USE_ASK = {"type": 4, "data": {"content": USA_ASK, "flags": 64, "allowed_mentions": {"parse": []}}}


def test_discord_fixture_table_covers_every_interaction_fixture() -> None:
    assert {p.name for p in INTERACTIONS} == set(EXPECTED)


@ASYNC
@pytest.mark.parametrize("path", INTERACTIONS, ids=lambda p: p.stem)
async def test_discord_every_interaction_fixture_is_answered_at_once(env, path: Path):  # noqa: F811 - the fixture
    client, services, _ = env
    before = await count_messages(services, channel="discord")
    started = time.monotonic()
    response = await post(client, json.loads(path.read_text()))
    assert time.monotonic() - started < 3
    assert response.status_code == 200, response.text
    expected = EXPECTED[path.name]
    assert response.json() == (USE_ASK if expected == "use /ask" else expected)
    await settle(0.3, services=services)
    assert await count_messages(services, channel="discord") == before
