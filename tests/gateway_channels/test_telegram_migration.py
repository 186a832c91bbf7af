"""A Telegram group upgraded to a supergroup gets a new chat id: its conversations follow it, through the
real app, aiogram and the fake Bot API (storage/chat_moves.py)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy import update as sql_update

from storage.models import Conversation
from tests.gateway_channels.conftest import QUESTION, get_message, messages_in_chat, settle, store_reply, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway, update

pytestmark = pytest.mark.asyncio(loop_scope="module")

ASK = [{"type": "bot_command", "offset": 0, "length": 4}]
UPGRADED = "Bad Request: group chat was upgraded to a supergroup chat"


@pytest_asyncio.fixture(name="env", scope="module", loop_scope="module")
async def started_env(tmp_path_factory):
    # Channels started: a refused send tells the inbox through the adapter's `deliver`, as polling does.
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-migration"), start_channels=True) as env_:
        yield env_


async def conversations_in(services, chat: str) -> list[Conversation]:
    async with services.sessions() as session:
        return list((await session.execute(select(Conversation).where(
            Conversation.channel == "telegram", Conversation.chat == chat).order_by(Conversation.id))).scalars())


def migration(update_id: int, chat: int, chat_type: str, **field: Any) -> dict[str, Any]:
    """The service message Telegram sends in the old group (`migrate_to_chat_id`) or the new one."""
    return update(update_id, chat, chat_type=chat_type, message_id=update_id, **field)


async def test_a_held_conversation_follows_the_group_to_its_supergroup(env):
    """An operator held a member's conversation in a group that was then upgraded: the member's messages
    in the supergroup (no mention: for the operator only) were dropped, as nobody held "their" chat."""
    client, services, fake = env
    old, new = -4001, -1004001
    await post(client, update(9501, old, "/ask " + QUESTION, chat_type="group", message_id=1, entities=ASK))
    await wait_until(lambda: sent_to(fake, old), what="the bot's answer in the group")
    [held] = await conversations_in(services, str(old))
    async with services.sessions() as session, session.begin():
        await session.execute(sql_update(Conversation).where(Conversation.id == held.id)
                              .values(state="operator", assigned_operator="sam"))
    # Telegram tells it in both chats; polling or a redelivery may bring either again.
    for body in (migration(9502, old, "group", migrate_to_chat_id=new),
                 migration(9503, new, "supergroup", migrate_from_chat_id=old),
                 migration(9502, old, "group", migrate_to_chat_id=new)):
        assert (await post(client, body)).status_code == 200
    assert await conversations_in(services, str(old)) == []
    [moved] = await conversations_in(services, str(new))
    assert (moved.id, moved.thread, moved.state) == (held.id, held.thread, "operator")
    # A plain message in the supergroup reaches the operator holding the conversation, and the bot stays quiet.
    await post(client, update(9504, new, "still waiting for the refund", chat_type="supergroup", message_id=2))
    stored = await wait_until(lambda: _texts_in(services, str(new)), what="the member's message stored")
    assert "still waiting for the refund" in stored
    reply_id = await store_reply(services, conversation_id=held.id, text="Refund sent today.")
    if await services.outbox.deliver(reply_id) == "skipped":  # the gateway's own drain took it first
        await wait_until(lambda: _sent(services, reply_id), what="the operator's reply sent")
    assert sent_to(fake, new)[-1].text.endswith("Refund sent today.") and len(sent_to(fake, new)) == 1


async def test_a_reply_refused_as_upgraded_goes_once_to_the_supergroup_and_the_conversation_follows(env):
    """Telegram refuses a send to the old group with the new id: the reply went there, but the conversation
    stayed at the old id, so every later reply was refused first, and the member's next message in the
    supergroup opened a new conversation without the one before."""
    client, services, fake = env
    old, new = -4002, -1004002
    fake.fail_next("sendMessage", status=400, description=UPGRADED, migrate_to_chat_id=new)
    await post(client, update(9511, old, "/ask " + QUESTION, chat_type="group", message_id=5, entities=ASK))
    [answer] = await wait_until(lambda: sent_to(fake, new), what="the answer in the supergroup")
    # Not a reply to message 5: that id is the old group's, and the supergroup's own 5 is another message.
    assert answer.reply_to is None and sent_to(fake, old) == []
    [moved] = await wait_until(lambda: conversations_in(services, str(new)), what="the conversation moved")
    await post(client, update(9512, new, "/ask " + QUESTION, chat_type="supergroup", message_id=1, entities=ASK))
    await wait_until(lambda: len(sent_to(fake, new)) == 2, what="the second answer")
    await settle(services=services)
    assert await conversations_in(services, str(old)) == [] and len(await conversations_in(services, str(new))) == 1
    assert [m.direction for m in await messages_in_chat(services, channel="telegram", chat=str(new))] == \
        ["in", "out", "in", "out"]
    refused = [c for c in fake.calls("sendMessage") if str(c.params.get("chat_id")) == str(old)]
    assert len(refused) == 1 and len(sent_to(fake, new)) == 2 and moved.thread == "member:5550001"


async def _texts_in(services, chat: str) -> list[str]:
    return [m.text for m in await messages_in_chat(services, channel="telegram", chat=chat)]


async def _sent(services, message_id: int) -> bool:
    return (await get_message(services, message_id)).status == "sent"
