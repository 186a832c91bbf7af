"""A private chat's edit of a message never stored, through the real app, aiogram and the fake Bot API: the
question asked now when the message is recent (its first delivery failed, and Telegram may still resend it),
never when it is older than that (sent before the bot had the chat, or purged since)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio

from gateway.models import NEVER_STORED_EDIT_WINDOW
from tests.gateway_channels.conftest import QUESTION, count_messages, messages_in_chat, settle, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway, update

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-private-edits")) as env_:
        yield env_


def sent(ago: timedelta) -> int:
    """A message's Telegram `date`, `ago` before now."""
    return int(time.time() - ago.total_seconds())


def edited(update_id: int, chat: int, text: str, *, date: int) -> dict[str, Any]:
    message = update(update_id, chat, text, message_id=30, date=date, edit_date=int(time.time()))["message"]
    return {"update_id": update_id, "edited_message": message}


async def test_a_private_question_redelivered_after_its_edit_is_answered_once_on_the_edit(env):
    """The original update's delivery failed, and the customer's edit came first: dropped as an edit of a message
    already answered, then Telegram's redelivery of the original was stored and answered on the text the customer
    had replaced."""
    client, services, fake = env
    chat, date = 7301, sent(timedelta(minutes=2))
    for update_id in (9802, 9802):  # the edit, and its own redelivery
        assert (await post(client, edited(update_id, chat, QUESTION, date=date))).status_code == 200
    assert (await post(client, update(9801, chat, "How much?", message_id=30, date=date))).status_code == 200
    [answer] = await wait_until(lambda: sent_to(fake, chat), what="the answer to the edited message")
    assert answer.reply_to == 30 and "$" in answer.text
    await settle()
    stored = await messages_in_chat(services, channel="telegram", chat=str(chat))
    assert [(m.direction, m.text) for m in stored][:1] == [("in", QUESTION)] and len(stored) == 2
    assert len(sent_to(fake, chat)) == 1


async def test_a_private_edit_of_a_message_older_than_any_redelivery_is_not_answered(env):
    """A message sent before the bot had the chat, or purged by retention: its edit is no question of today."""
    client, services, fake = env
    chat = 7302
    before = await count_messages(services, channel="telegram")
    date = sent(NEVER_STORED_EDIT_WINDOW + timedelta(minutes=5))
    assert (await post(client, edited(9803, chat, QUESTION, date=date))).status_code == 200
    await settle()
    assert sent_to(fake, chat) == [] and await count_messages(services, channel="telegram") == before
