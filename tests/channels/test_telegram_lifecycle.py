"""TelegramAdapter against a local fake Bot API: start-up, long polling and webhook registration."""

from __future__ import annotations

import asyncio
import time

import pytest

from channels.telegram import TelegramAdapter, set_webhook
from gateway.errors import ConfigError
from gateway.models import InboundMessage
from tests.channels.telegram_helpers import (  # noqa: F401 - `fake` fixture
    SECRET,
    _request,
    _settings,
    _update,
    fake_fixture,
)
from tests.fakes.telegram_api import FakeTelegramAPI


async def test_start_learns_username_so_group_mentions_work(fake: FakeTelegramAPI) -> None:
    tg = TelegramAdapter("demo", _settings(fake.base_url))
    text = "@support_bot hi"
    update = _update(text, chat_type="group", entities=[{"type": "mention", "offset": 0, "length": 12}])
    assert not tg.parse(_request(update)).messages
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        assert tg.parse(_request(update)).messages[0].text == "hi"
        assert not fake.calls("getUpdates")  # webhook mode does not poll
    finally:
        await tg.stop()


async def test_polling_delivers_updates_and_stops_cleanly(fake: FakeTelegramAPI) -> None:
    fake.webhook = {"url": "https://old.example/hook"}
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    received: list[InboundMessage] = []
    got_two = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        received.append(message)
        if len(received) == 2:
            got_two.set()

    await tg.start(deliver)
    fake.push_update(_update("first", update_id=9001))
    fake.push_update({"update_id": 9002, "edited_message": _update("x")["message"]})
    fake.push_update(_update("/start", update_id=9003, entities=[{"type": "bot_command", "offset": 0, "length": 6}]))
    await asyncio.wait_for(got_two.wait(), timeout=5)
    started = time.monotonic()
    await tg.stop()
    assert time.monotonic() - started < 3
    assert [m.external_id for m in received] == ["9001", "9003"]
    assert received[0].text == "first" and received[1].raw["command"] == "start"
    assert received[0].sender.display_name == "Ann Lee"  # aiogram's `from_user` dumped back as `from`
    assert fake.calls("deleteWebhook") and not fake.webhook
    assert fake.calls("getUpdates")[0].params["allowed_updates"] == ["message", "edited_message", "channel_post", "edited_channel_post"]


async def test_set_webhook_registers_url_with_secret(fake: FakeTelegramAPI) -> None:
    await set_webhook(_settings(fake.base_url), "https://gw.example/webhooks/demo/telegram")
    assert fake.webhook["url"] == "https://gw.example/webhooks/demo/telegram"
    assert fake.webhook["secret_token"] == SECRET


async def test_set_webhook_refuses_a_secret_telegram_would_reject() -> None:
    with pytest.raises(ConfigError):
        await set_webhook(_settings(webhook_secret="has spaces!"), "https://gw.example/webhooks/demo/telegram")
