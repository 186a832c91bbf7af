"""The web chat is on for every bot unless its config turns it off (README, Configuration)."""

from __future__ import annotations

import pytest

from gateway.models import ConversationRef, InboundMessage, Sender
from tests.gateway_channels.conftest import gateway_app


@pytest.mark.parametrize("web", [{"enabled": False}, None], ids=["enabled-false", "null"])
async def test_a_bot_whose_web_chat_is_off_has_no_public_chat(tmp_path, web) -> None:
    async with gateway_app(tmp_path, channels={"web": web}, env={}) as (client, _services):
        response = await client.post("/v1/bots/acme/chat", json={"session_id": "s-1", "text": "How much is Plus?"})
        assert response.status_code == 404 and "has no web chat" in response.json()["error"]
        assert [b["name"] for b in (await client.get("/v1/bots")).json()["bots"]] == []


async def test_a_bot_without_a_web_key_has_the_web_chat(tmp_path) -> None:
    async with gateway_app(tmp_path, channels={}, env={}) as (client, _services):
        assert [b["name"] for b in (await client.get("/v1/bots")).json()["bots"]] == ["acme"]


async def test_a_transcript_kept_from_before_the_web_chat_was_turned_off_is_not_served(tmp_path) -> None:
    # Turning the web chat off (a leaked session id, a retired widget) closed the chat but not its
    # transcripts: anyone holding a session id still read the conversation, operator replies included.
    async with gateway_app(tmp_path, channels={"web": {"enabled": False}}, env={}) as (client, services):
        stored = InboundMessage(channel="web", external_id="s-1/m-1", conversation=ConversationRef(channel="web", chat="s-1"),
                                sender=Sender(external_id="s-1", display_name="Web visitor"), text="my card ends 4242")
        await services.inbox.accept("acme", stored)
        response = await client.get("/v1/bots/acme/sessions/s-1/messages")
        assert response.status_code == 404 and "has no web chat" in response.json()["error"]
        assert "4242" not in response.text


async def test_web_chat_of_an_unknown_bot_names_the_bots_that_have_one(tmp_path) -> None:
    """`/v1/bots/acmee/chat` said only "unknown bot 'acmee'", leaving a typo to be found by reading the config;
    the 404 names what `GET /v1/bots` lists anyway (only bots with a web chat)."""
    async with gateway_app(tmp_path, channels={}, env={}) as (client, _services):
        for path in ("/v1/bots/acmee/chat", "/v1/bots/acmee/sessions/s-1/messages"):
            response = (await client.post(path, json={"session_id": "s-1", "text": "hi"}) if path.endswith("chat")
                        else await client.get(path))
            assert response.status_code == 404
            assert response.json()["error"] == "unknown bot 'acmee'; the bots with a web chat: acme (GET /v1/bots)"


async def test_a_channel_turned_off_is_not_among_the_bots_channels(tmp_path) -> None:
    """`GET /v1/bots` listed a channel written with `enabled: false` (no adapter runs for it), so a client
    read the bot as reachable on Telegram while the gateway answered every Telegram update 404."""
    async with gateway_app(tmp_path, channels={"telegram": {"enabled": False}}, env={}) as (client, _services):
        assert [b["channels"] for b in (await client.get("/v1/bots")).json()["bots"]] == [["web"]]
