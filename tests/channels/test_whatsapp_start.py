"""A WhatsApp channel's Twilio credentials, checked at start (Twilio's Account fetch, the real SDK against the fake
Twilio): a wrong auth_token showed only on the first reply's send, the channel having started as fine."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from channels.whatsapp import WhatsAppAdapter
from gateway.errors import ChannelSendError
from tests.channels.test_whatsapp import ACCOUNT_SID, _settings
from tests.channels.whatsapp_helpers import fake_fixture  # noqa: F401 - the fixture `fake`
from tests.fakes.twilio_api import FakeTwilio, Reply


async def _nothing(*_args) -> None:
    return None


async def test_right_credentials_start_the_channel_after_one_authenticated_account_fetch(fake: FakeTwilio) -> None:
    adapter = WhatsAppAdapter("support", _settings(fake.base_url))
    try:
        await adapter.start(_nothing)
        [fetch] = fake.account_fetches
        assert fetch.method == "GET" and fetch.authorized and fetch.status == 200
        assert fetch.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}.json"
        assert fake.delivered == [] and fake.lists == []  # no message sent, none listed
    finally:
        await adapter.stop()


async def test_a_wrong_auth_token_fails_the_start_at_once(fake: FakeTwilio) -> None:
    adapter = WhatsAppAdapter("support", _settings(fake.base_url, auth_token="not-the-right-token-0000"))
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.start(_nothing)
        assert info.value.permanent
        assert str(info.value).startswith("Twilio refused the account_sid and auth_token (401, error 20003")
        assert "not-the-right-token" not in str(info.value)
        assert [f.status for f in fake.account_fetches] == [401]
    finally:
        await adapter.stop()


async def test_a_transient_failure_starts_the_channel_and_asks_again_in_the_background(fake: FakeTwilio) -> None:
    fake.script(Reply(status=503, code=20503, message="Service Unavailable"))
    adapter = WhatsAppAdapter("support", _settings(fake.base_url), identity_retry_s=0.05)
    try:
        with structlog.testing.capture_logs() as logs:
            await adapter.start(_nothing)  # started: a Twilio that is down is no wrong credential
            for _ in range(100):
                if len(fake.account_fetches) >= 2 and any(e["event"] == "whatsapp.account_checked" for e in logs):
                    break
                await asyncio.sleep(0.05)
        [failed] = [e for e in logs if e["event"] == "whatsapp.account_check_failed"]
        assert failed["log_level"] == "warning" and failed["failures"] == 1
        assert failed["next"] == "asked again in the background" and "503" in failed["error"]
        [checked] = [e for e in logs if e["event"] == "whatsapp.account_checked"]
        assert checked["failures"] == 1
        assert [f.status for f in fake.account_fetches] == [503, 200]
    finally:
        await adapter.stop()


async def test_twilio_unreachable_at_start_does_not_stop_the_channel() -> None:
    closed = "http://127.0.0.1:18521"  # a port of this test's range nothing listens on
    adapter = WhatsAppAdapter("support", _settings(closed), identity_retry_s=30)
    try:
        with structlog.testing.capture_logs() as logs:
            await adapter.start(_nothing)
        [failed] = [e for e in logs if e["event"] == "whatsapp.account_check_failed"]
        assert failed["error"].startswith("cannot reach Twilio at http://127.0.0.1:18521") and failed["failures"] == 1
    finally:
        await adapter.stop()  # the background ask is cancelled


async def test_an_api_base_without_the_account_resource_starts_the_channel_warned_once(fake: FakeTwilio) -> None:
    # A stand-in for Twilio that speaks only Messages.json answers the Account fetch 404: taken for a refused
    # account, the channel did not start, though its sends would have worked.
    fake.script(Reply(status=404, code=20404, message="The requested resource was not found"))
    adapter = WhatsAppAdapter("support", _settings(fake.base_url), identity_retry_s=0.05)
    try:
        with structlog.testing.capture_logs() as logs:
            await adapter.start(_nothing)
            await asyncio.sleep(0.3)  # a background ask would have come by now
        [failed] = [e for e in logs if e["event"] == "whatsapp.account_check_failed"]
        assert failed["next"].startswith("not asked again") and "404" in failed["error"]
        assert [f.status for f in fake.account_fetches] == [404]
    finally:
        await adapter.stop()
