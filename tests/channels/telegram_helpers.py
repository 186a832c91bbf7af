"""Shared by the Telegram adapter tests: the fake Bot API and adapter fixtures, settings and update builders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from channels.base import RawRequest
from channels.telegram import TelegramAdapter
from gateway.models import ConversationRef
from gateway.settings import TelegramChannel
from tests.fakes.telegram_api import FakeTelegramAPI

TOKEN = "723738643:AAH-fake-token_for-tests"
SECRET = "s3cret-Token_value"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "telegram"
DM = ConversationRef(channel="telegram", chat="367699112")


def _settings(base: str = "http://127.0.0.1:9", **overrides: Any) -> TelegramChannel:
    values: dict[str, Any] = {"token": TOKEN, "webhook_secret": SECRET, "api_base": base, **overrides}
    return TelegramChannel(**values)


def _request(body: dict[str, Any] | bytes, secret: str | None = SECRET) -> RawRequest:
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers["x-telegram-bot-api-secret-token"] = secret
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RawRequest(url="https://gw.example/webhooks/demo/telegram", headers=headers, query={}, body=data)


def _update(text: str, *, update_id: int = 5001, chat_type: str = "private", **message: Any) -> dict[str, Any]:
    chat = {"id": -100777 if chat_type != "private" else 367699112, "type": chat_type}
    msg = {"message_id": 42, "date": 1700000000, "chat": chat, "text": text,
           "from": {"id": 367699112, "is_bot": False, "first_name": "Ann", "last_name": "Lee"}, **message}
    return {"update_id": update_id, "message": msg}


@pytest.fixture(name="fake")
async def fake_fixture() -> Any:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


@pytest.fixture(name="adapter")
async def adapter_fixture(fake: FakeTelegramAPI) -> Any:
    tg = TelegramAdapter("demo", _settings(fake.base_url), username="support_bot", max_retry_wait=5)
    yield tg
    await tg.stop()
