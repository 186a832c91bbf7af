"""Processing survives naughty strings: the worker answers a sample of them, once each, on every hop.

The strings go in through the Telegram webhook (so the reply is rendered to Telegram HTML and checked
by the strict fake Bot API parser) and through the web chat, with the offline model and a one-document
knowledge base. No crash, every inbound message done (or failed with a reply), one reply each.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Message
from tests.conftest import docs_source
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.gateway_channels.conftest import wait_until
from tests.reliability.conftest import TG_TOKEN, blns, running_app, telegram_request, telegram_update

pytestmark = pytest.mark.asyncio(loop_scope="module")

# About 30 strings spread over the whole list (each category of BLNS), all with visible text.
SAMPLE = [s for s in blns()[::16] if s.strip()][:30]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("badinput-worker")
    async with FakeTelegramAPI(TG_TOKEN) as telegram:
        bots = [{"name": "acme", "fallback_text": "I couldn't find that in the Acme help center.",
                 "sources": [docs_source(tmp_path)],
                 "channels": {"web": {}, "telegram": {"token": "${REL_TG_TOKEN}", "webhook_secret": "${REL_TG_SECRET}",
                                                      "api_base": telegram.base_url}}}]
        async with running_app(tmp_path, bots=bots, ingest=True) as (client, services):
            yield client, services, telegram


async def _inbound(services, channel: str) -> list[Message]:
    async with services.sessions() as session:
        return list((await session.execute(select(Message).where(
            Message.channel == channel, Message.direction == "in").order_by(Message.id))).scalars().all())


async def _replies_to(services, message_id: int) -> list[Message]:
    async with services.sessions() as session:
        return list((await session.execute(select(Message).where(
            Message.reply_to_id == message_id, Message.direction == "out"))).scalars().all())


async def test_worker_answers_each_naughty_string_once_through_telegram(env):
    client, services, telegram = env
    assert len(SAMPLE) >= 25
    for i, text in enumerate(SAMPLE):
        response = await client.post("/webhooks/acme/telegram",
                                     **telegram_request(telegram_update(200000 + i, text, chat=8000 + i)))
        assert response.status_code == 200

    async def settled():
        rows = await _inbound(services, "telegram")
        return rows if len(rows) == len(SAMPLE) and all(m.status not in ("pending", "processing") for m in rows) \
            else None

    rows = await wait_until(settled, timeout=120, what="every naughty message processed")
    for row in rows:
        assert row.status in ("done", "failed"), (row.text, row.status, row.error)
        replies = await _replies_to(services, row.id)
        assert len(replies) == 1, (row.text, [r.text for r in replies])
    await wait_until(lambda: len({m.chat_id for m in telegram.sent}) == len(SAMPLE), timeout=60,
                     what="a reply in every chat")
    per_chat = {}
    for sent in telegram.sent:
        per_chat[sent.chat_id] = per_chat.get(sent.chat_id, 0) + 1
    assert per_chat == {8000 + i: 1 for i in range(len(SAMPLE))}  # one reply each, none twice
    assert (await client.get("/healthz")).status_code == 200


async def test_worker_answers_each_naughty_string_once_through_the_web_chat(env):
    client, services, _ = env
    for i, text in enumerate(SAMPLE):
        response = await client.post("/v1/bots/acme/chat",
                                     json={"session_id": f"naughty-{i}", "text": text, "message_id": f"naughty-{i}"})
        assert response.status_code == 200, (text, response.text)
        body = response.json()
        assert isinstance(body["reply"], str) and body["reply"].strip(), text
    rows = await _inbound(services, "web")
    assert len(rows) == len(SAMPLE) and all(r.status in ("done", "failed") for r in rows)
    for row in rows:
        assert len(await _replies_to(services, row.id)) == 1
