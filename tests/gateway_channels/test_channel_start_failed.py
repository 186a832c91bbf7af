"""A channel whose token the platform rejects at start: one line saying so, not a traceback, and not listed
as started."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tests.fakes.discord_api import FakeDiscord
from tests.gateway_channels.conftest import gateway_app

pytestmark = pytest.mark.asyncio


async def test_a_rejected_token_at_start_is_one_line_and_the_channel_is_not_listed_as_started(tmp_path, monkeypatch):
    monkeypatch.setattr("gateway.app.configure_logging_for", lambda settings: None)  # capture_logs' processors stay
    fake = await FakeDiscord().start()
    channels = {"discord": {"token": "${DISCORD_TOKEN}", "api_base": fake.api_base, "gateway_url": fake.gateway_url}}
    try:
        with capture_logs() as logs:
            async with gateway_app(tmp_path, channels=channels, env={"DISCORD_TOKEN": "not-the-token"},
                                   start_channels=True) as (client, _services):
                ready = (await client.get("/readyz")).json()
    finally:
        await fake.close()
    [failed] = [e for e in logs if e["event"] == "channel.start_failed"]
    # A newcomer's wrong token was a 40-line traceback of discord.py's and the SDK's frames.
    assert "exc_info" not in failed and failed["error"] == "discord token rejected"
    assert failed["channel"] == "discord" and "token" in failed["hint"]
    [started] = [e for e in logs if e["event"] == "gateway.started"]
    # It was listed among the channels started, under a line saying the gateway had started.
    assert "acme/discord" not in started["channels"] and started["failed_channels"] == ["acme/discord"]
    assert ready["connections"]["acme/discord"] == "not started: discord token rejected"


async def test_a_twilio_auth_token_refused_at_start_is_one_line_not_the_first_sends_failure(tmp_path, monkeypatch):
    """WhatsApp checked nothing at start: a wrong auth_token showed only when the first reply's send failed."""
    from tests.fakes.twilio_api import FakeTwilio

    monkeypatch.setattr("gateway.app.configure_logging_for", lambda settings: None)  # capture_logs' processors stay
    sid = "AC" + "0123456789abcdef" * 2
    fake = FakeTwilio(account_sid=sid, auth_token="the-right-auth-token-0123").start()
    channels = {"whatsapp": {"account_sid": sid, "auth_token": "${TWILIO_AUTH_TOKEN}", "from_number": "+15550001111",
                             "public_url": "https://bots.example.org", "api_base": fake.base_url}}
    try:
        with capture_logs() as logs:
            async with gateway_app(tmp_path, channels=channels, env={"TWILIO_AUTH_TOKEN": "not-the-auth-token-000"},
                                   start_channels=True) as (client, _services):
                ready = (await client.get("/readyz")).json()
    finally:
        fake.stop()
    [failed] = [e for e in logs if e["event"] == "channel.start_failed"]
    assert "exc_info" not in failed and failed["channel"] == "whatsapp"
    assert failed["error"].startswith("Twilio refused the account_sid and auth_token (401, error 20003")
    [started] = [e for e in logs if e["event"] == "gateway.started"]
    assert started["failed_channels"] == ["acme/whatsapp"]
    assert ready["connections"]["acme/whatsapp"].startswith("not started: Twilio refused")
    assert fake.delivered == []  # nothing was sent to find it out
