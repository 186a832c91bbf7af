"""Shared by the WhatsApp adapter's sending tests: the fake Twilio and the adapter sending to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from channels.whatsapp import WhatsAppAdapter
from tests.channels.test_whatsapp import ACCOUNT_SID, AUTH_TOKEN, _settings
from tests.fakes.twilio_api import FakeTwilio


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[FakeTwilio]:
    server = FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    yield server
    server.stop()


@pytest.fixture(name="live")
async def live_fixture(fake: FakeTwilio) -> AsyncIterator[WhatsAppAdapter]:
    adapter = WhatsAppAdapter("support", _settings(fake.base_url), backoff=0.01)
    yield adapter
    await adapter.stop()
