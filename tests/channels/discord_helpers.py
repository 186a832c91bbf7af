"""Shared by the Discord adapter tests: the fake Discord fixture, signed interactions, settings and payload builders."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from channels.base import RawRequest, WebhookResult
from channels.discord import DiscordAdapter, classify_gateway_message
from gateway.models import InboundMessage
from gateway.settings import DiscordChannel
from tests.fakes.discord_api import APPLICATION_ID, FakeDiscord, message_object

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "discord"
CHANNEL = "900000000000000001"
GUILD = "900000000000000002"
SIGNING_KEY = SigningKey.generate()


@asynccontextmanager
async def connected(adapter: DiscordAdapter, fake: FakeDiscord) -> AsyncIterator[list[InboundMessage]]:
    """The adapter started on the fake gateway (identified); yields the list it delivers into, and stops it."""
    delivered: list[InboundMessage] = []

    async def deliver(message: InboundMessage) -> None:
        delivered.append(message)

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        yield delivered
    finally:
        await adapter.stop()


async def wait_for(delivered: list[InboundMessage], count: int) -> None:
    """Until `count` messages arrived (30 s at most: a loaded machine), plus a moment for any unexpected
    extra one."""
    async with asyncio.timeout(30):
        while len(delivered) < count:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


def signed(body: bytes, *, timestamp: int | None = None, key: SigningKey = SIGNING_KEY) -> RawRequest:
    """A request signed exactly as Discord signs interactions: Ed25519 over timestamp + body."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = key.sign(ts.encode() + body).signature.hex()
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": ts, "content-type": "application/json"}
    return RawRequest(url="http://gw/webhooks/b/discord/interactions", headers=headers, query={}, body=body)


def settings_for(fake: FakeDiscord | None = None, **extra: Any) -> DiscordChannel:
    return DiscordChannel(
        token="fake-bot-token",
        public_key=SIGNING_KEY.verify_key.encode().hex(),
        api_base=fake.api_base if fake else None,
        gateway_url=fake.gateway_url if fake else None,
        **extra,
    )


def guild_message(content: str, *, message_id: str = "900000000000000010", channel_id: str = CHANNEL,
                  **extra: Any) -> dict[str, Any]:
    author = extra.pop("author", {"id": "900000000000000003", "username": "alice", "discriminator": "0", "avatar": None})
    return message_object(message_id=message_id, channel_id=channel_id, content=content, author=author,
                          timestamp="2026-11-29T10:00:00+00:00", guild_id=GUILD, **extra)


def ask_interaction(question: str) -> dict[str, Any]:
    body = json.loads((FIXTURES / "discord_api_docs/interaction_application_command_slash_chat_input.json").read_text())
    option = {"type": 3, "name": "question", "value": question}
    body["data"] = {"type": 1, "name": "ask", "id": "1", "options": [option]}
    body["application_id"] = APPLICATION_ID
    return body


@pytest.fixture(name="fake")
async def fake_fixture():
    server = await FakeDiscord().start()
    yield server
    await server.close()


@pytest.fixture(name="adapter")
async def adapter_fixture(fake: FakeDiscord):
    """The adapter of bot `support` on the fake Discord, not started; stopped after the test."""
    instance = DiscordAdapter("support", settings_for(fake))
    yield instance
    await instance.stop()


def parse_gateway_message(payload: dict[str, Any], *, bot_user_id: str, respond_in_groups: str = "mention",
                          in_thread: bool = False) -> InboundMessage | None:
    """`classify_gateway_message`, with None for an ignored message (its reason dropped)."""
    result = classify_gateway_message(payload, bot_user_id=bot_user_id, respond_in_groups=respond_in_groups,
                                      in_thread=in_thread)
    return None if isinstance(result, str) else result


def parse_gateway_event(envelope: dict[str, Any], *, bot_user_id: str) -> WebhookResult:
    """What a recorded gateway frame ({op, t, s, d}) comes to. Only MESSAGE_CREATE reaches the adapter's
    own code (`classify_gateway_message`); the running gateway leaves control frames to discord.py, and
    `GatewayClient` logs edits and deletions (tests/channels/test_discord_gateway.py), so the reasons for
    other frames are this helper's labels."""
    op, event, data = envelope.get("op"), envelope.get("t"), envelope.get("d")
    if op != 0:
        return WebhookResult(ignored=(f"gateway control frame op {op} (handled by discord.py)",))
    if event == "MESSAGE_CREATE" and isinstance(data, dict):
        result = classify_gateway_message(data, bot_user_id=bot_user_id)
        return WebhookResult(ignored=(result,)) if isinstance(result, str) else WebhookResult(messages=(result,))
    reasons = {
        "MESSAGE_UPDATE": "message edit: the first version was already answered",
        "MESSAGE_DELETE": "message deletion",
        "MESSAGE_REACTION_ADD": "reaction",
        "INTERACTION_CREATE": "interaction over the gateway: answered on the interactions endpoint",
    }
    return WebhookResult(ignored=(reasons.get(event or "", f"gateway event {event} is not a message"),))
