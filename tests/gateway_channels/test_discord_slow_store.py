"""A Discord `/ask` while the database is slow, through the real app and the fake Discord: Discord gives an
interaction 3 s for its response, and the deferral (type 5) was sent only once the question was stored, so
a store taking longer showed "The application did not respond". The store is now waited for 2 s at most."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from tests.fakes.discord_api import FakeDiscord
from tests.gateway_channels.conftest import gateway_app, messages_in_chat, settle, settled_chat, wait_until
from tests.gateway_channels.test_discord_e2e import SIGNING_KEY, USA_ASK, ask, followups, post
from tests.pausing import pausing_sessions

pytestmark = pytest.mark.asyncio(loop_scope="module")

SLOW_STORE_S = 4.0  # past Discord's 3 s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    fake = await FakeDiscord().start()
    channels = {"discord": {"token": "${DISCORD_TOKEN}", "public_key": SIGNING_KEY.verify_key.encode().hex(),
                            "api_base": fake.api_base, "gateway_url": fake.gateway_url}}
    try:
        async with gateway_app(tmp_path_factory.mktemp("discord-slow"), channels=channels,
                               env={"DISCORD_TOKEN": fake.token}, bot={"replies": {"use_ask": USA_ASK}}) as app:
            yield (*app, fake)
    finally:
        await fake.close()


async def test_discord_ask_is_deferred_in_time_while_the_store_is_slow_and_answered_once(env):
    client, services, fake = env
    fast = services.inbox._sessions
    # The inbox's next transaction stops after its first statement for longer than Discord waits.
    services.inbox._sessions = pausing_sessions(services.engine, lambda: asyncio.sleep(SLOW_STORE_S), after_statement=1)
    try:
        body = ask("1400000000000000701", channel="1300000000000000701")
        started = time.monotonic()
        with capture_logs() as logs:
            first = await post(client, body)
            waited = time.monotonic() - started
            again = await post(client, body)  # a second delivery meanwhile: still one question
            [reply] = await wait_until(lambda: followups(fake, "1400000000000000701"), timeout=30, what="the answer")
    finally:
        services.inbox._sessions = fast
    assert first.status_code == 200 and first.json() == {"type": 5} and waited < 3.0
    assert again.status_code == 200 and again.json() == {"type": 5}
    assert "$" in reply["content"]
    slow = [e["external_ids"] for e in logs if e["event"] == "webhook.store_slow"]
    assert slow and all(ids == ["1400000000000000701"] for ids in slow)  # the second waited behind the first
    assert not [e for e in logs if e["event"] == "webhook.store_failed"]
    await settle()
    assert len(followups(fake, "1400000000000000701")) == 1
    stored = await settled_chat(services, channel="discord", chat="1300000000000000701")
    assert [m.direction for m in stored] == ["in", "out"]


async def test_discord_ask_with_a_fast_store_is_stored_before_its_deferral(env):
    client, services, fake = env
    response = await post(client, ask("1400000000000000702", channel="1300000000000000702"))
    assert response.json() == {"type": 5}
    # Nothing left storing in the background: the question was in the database when Discord got its answer.
    assert not services.late_stores
    [question, *_] = await messages_in_chat(services, channel="discord", chat="1300000000000000702")
    assert question.direction == "in" and question.external_id == "1400000000000000702"
