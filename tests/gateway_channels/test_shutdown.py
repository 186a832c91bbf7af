"""Shutting down with a turn in flight: its reply goes out through the channel before the channel closes."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import load_settings
from tests.conftest import upgrade, write_config
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels.conftest import bot_config, messages_in_chat
from tests.gateway_channels.whatsapp_rig import ACCOUNT_SID, AUTH_TOKEN, BOT_NUMBER, PUBLIC_URL, inbound, post

PHONE = "+15550001111"


async def test_a_turn_in_flight_at_shutdown_is_sent_before_the_channel_closes(tmp_path):
    """The worker finishes the turn (up to 10 s) and only then are the channels stopped. Stopped
    first, the WhatsApp client was closed under the send, which opened a new one that nothing closed."""
    fake = FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    channels = {"whatsapp": {"account_sid": ACCOUNT_SID, "auth_token": "${WA_TOKEN}", "from_number": BOT_NUMBER,
                             "public_url": PUBLIC_URL, "api_base": fake.base_url}}
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("WA_TOKEN", AUTH_TOKEN)
            settings = load_settings(write_config(tmp_path, bots=[bot_config(tmp_path, channels)]))
        await asyncio.to_thread(upgrade, settings.database_url)
        app = create_app(settings, start_scheduler=False, start_channels=False)
        services = app.state.services
        in_flight = asyncio.Event()
        async with app.router.lifespan_context(app):
            await services.knowledge.ingest()
            handle = services.worker.handler.handle

            async def slow(message):
                in_flight.set()
                await asyncio.sleep(1.0)
                return await handle(message)

            services.worker.handler.handle = slow
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
                assert (await post(client, inbound("SM" + "1" * 32, PHONE))).status_code == 200
            await asyncio.wait_for(in_flight.wait(), 30)
        # The lifespan has ended: Services.stop() ran while the turn slept.
        adapter = services.adapters[("acme", "whatsapp")]
        assert adapter._client is None  # closed, not opened again after stop
        replies = [r for r in fake.delivered if r.form.get("To") == f"whatsapp:{PHONE}"]
        assert len(replies) == 1 and "Plus" in replies[0].form["Body"]
        stored = await messages_in_chat(services, channel="whatsapp", chat=f"whatsapp:{PHONE}")
        assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "sent")]
    finally:
        fake.stop()
