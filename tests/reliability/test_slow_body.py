"""A body that trickles in (a slow-loris client) is refused at a deadline, on webhooks and the web chat."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.reliability.conftest import TG_TOKEN, inbound_counts, running_app, telegram_channel

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("slow-body")
    async with FakeTelegramAPI(TG_TOKEN) as telegram:
        bots = [{"name": "acme", "channels": {"web": {}, "telegram": telegram_channel(telegram.base_url)}}]
        async with running_app(tmp_path, bots=bots, start_worker=False) as (client, services):
            yield client, services


class _Trickling:
    """A body sent a byte at a time, slower than any platform sends one."""

    def __init__(self) -> None:
        self.sent = 0

    async def __aiter__(self):
        while True:
            self.sent += 1
            yield b"{"
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(("path", "channel"), [("/webhooks/acme/telegram", "telegram"), ("/v1/bots/acme/chat", "web")])
async def test_a_body_trickling_in_is_408_at_the_deadline_and_stores_nothing(env, path, channel, monkeypatch):
    # Such a connection held its socket, and what it had sent, until the client stopped: a slow-loris
    # client never does, and a few hundred of them use up the server's file descriptors.
    monkeypatch.setattr("gateway.http.webhooks.BODY_DEADLINE_S", 0.5)
    client, services = env
    body = _Trickling()
    response = await asyncio.wait_for(client.post(path, content=body, headers={"content-type": "application/json"}), 10)
    assert response.status_code == 408 and response.json()["error"] == "body not received within 0.5 s"
    assert 2 <= body.sent <= 10
    assert await inbound_counts(services, channel=channel) == {}
