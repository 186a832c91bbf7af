"""Telegram update ids through the real app and the fake Bot API: after a week without updates Telegram
restarts them at a random number, so a new message may come under an id an old, stored one had. It was
dropped as a duplicate delivery; a real redelivery (the same update sent again) is still stored once."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from tests.gateway_channels.conftest import QUESTION, settle, settled_chat, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway, update

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-update-ids")) as env_:
        yield env_


async def test_telegram_new_message_under_an_old_update_id_is_answered_not_dropped(env):
    client, services, fake = env
    assert (await post(client, update(9301, 1301, QUESTION, message_id=11))).status_code == 200
    await wait_until(lambda: sent_to(fake, 1301), what="the first answer")
    # Days later, ids restarted: another customer's new message comes under the same update id.
    assert (await post(client, update(9301, 1302, QUESTION, message_id=11))).status_code == 200
    await wait_until(lambda: sent_to(fake, 1302), what="the answer to the new message")
    # And the first customer's next message under it too (ids restart anywhere, a chat's message ids go on).
    assert (await post(client, update(9301, 1301, QUESTION, message_id=12))).status_code == 200
    await wait_until(lambda: len(sent_to(fake, 1301)) == 2, what="the answer to the chat's next message")
    stored = await settled_chat(services, channel="telegram", chat="1302")
    assert [m.direction for m in stored] == ["in", "out"]


async def test_telegram_redelivered_update_is_still_stored_and_answered_once(env):
    client, services, fake = env
    body = update(9311, 1311, QUESTION, message_id=21)
    assert (await post(client, body)).status_code == 200
    responses = await asyncio.gather(*(post(client, body) for _ in range(3)))
    assert all(r.status_code == 200 for r in responses)
    await wait_until(lambda: sent_to(fake, 1311), what="the answer")
    await settle(services=services)
    assert (await post(client, body)).status_code == 200  # redelivered once more after it was answered
    await settle(services=services)
    assert len(sent_to(fake, 1311)) == 1
    stored = await settled_chat(services, channel="telegram", chat="1311")
    assert [m.direction for m in stored] == ["in", "out"]
