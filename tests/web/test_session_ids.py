"""Web chat session ids a caller could guess are refused: a session id reads its transcript and writes as its
visitor, so `me-1` would hand one visitor's conversation to anyone who tries it."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from gateway.errors import ConfigError
from gateway.settings import load_settings
from storage.models import Message
from tests.conftest import app_client, write_config

WEB = {"min_session_id_length": 16}  # what README recommends (the default sets no rule: the contract has none)


def widget_like_id() -> str:
    """What widget.js's newSessionId makes: 'web-' and 16 random bytes in hex."""
    return "web-" + uuid.uuid4().hex


async def _inbound(client) -> int:
    async with client.services.sessions() as session:
        return (await session.execute(select(func.count()).select_from(Message)
                                      .where(Message.direction == "in"))).scalar_one()


@pytest.mark.parametrize("session_id", ["me-1", "user-42-abcdefg", "a" * 40, "12" * 20])
async def test_a_guessable_session_id_is_refused_on_the_chat_and_the_transcript(tmp_path, session_id) -> None:
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": WEB}}]) as client:
        chat = await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": "Hello?"})
        transcript = await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")
        assert await _inbound(client) == 0  # nothing stored
    for response in (chat, transcript):
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert "at least 16 characters, at least 8 of them different" in error
        assert "channels.web.min_session_id_length" in error


async def test_the_widgets_own_ids_pass_and_a_bot_may_lower_the_bar(tmp_path) -> None:
    bots = [{"name": "acme", "channels": {"web": WEB}},
            {"name": "kiosk", "channels": {"web": {"min_session_id_length": 4}}},
            {"name": "open", "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots) as client:
        session_id = widget_like_id()
        ok = await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": "Hello?"})
        transcript = (await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")).json()
        short = await client.post("/v1/bots/kiosk/chat", json={"session_id": "me-1", "text": "Hello?"})
        too_short = await client.post("/v1/bots/kiosk/chat", json={"session_id": "me1", "text": "Hello?"})
        plain = await client.post("/v1/bots/kiosk/chat", json={"session_id": "aaaa", "text": "Hello?"})
        unset = await client.post("/v1/bots/open/chat", json={"session_id": "s1", "text": "Hello?"})  # no rule
    assert ok.status_code == 200, ok.text
    assert [m["direction"] for m in transcript["messages"]][:1] == ["in"]
    assert short.status_code == 200, short.text
    assert too_short.status_code == 422 and "at least 4 characters, at least 2 of them" in too_short.json()["error"]
    assert plain.status_code == 422
    assert unset.status_code == 200, unset.text


@pytest.mark.parametrize("value", [0, 37, "many"])  # over 36 refused the widget's own ids
def test_a_min_session_id_length_out_of_range_is_a_config_error(tmp_path, value) -> None:
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {"min_session_id_length": value}}}])
    with pytest.raises(ConfigError, match="min_session_id_length"):
        load_settings(config)
