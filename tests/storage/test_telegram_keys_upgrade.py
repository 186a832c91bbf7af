"""Telegram's delivery key changed from the update id to `update_id:chat:message_id` (`delivery_key`). An update
stored by the older gateway and sent again after the upgrade (Telegram resends a webhook delivery it got no answer
to, and getUpdates an update whose offset was not moved past before the stop, for 24 hours) was stored under its
new key as a new message, and answered a second time; migration 0019 gives the recent ones their new key."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select

from channels.telegram_updates import UpdateParser
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation, Message
from tests.conftest import upgrade


def _update(update_id: int, chat: int, message_id: int) -> dict:
    return {"update_id": update_id, "message": {
        "message_id": message_id, "date": 1_765_000_000, "text": "where is my order?",
        "chat": {"id": chat, "type": "private"}, "from": {"id": chat, "is_bot": False, "first_name": "Ann"}}}


async def test_an_update_stored_before_the_key_changed_and_sent_again_after_is_stored_once(database_url):
    await asyncio.to_thread(upgrade, database_url, "0018")
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session, session.begin():  # as the older gateway stored it: the update id alone
            # Its rows as models: today's `store_inbound` reads `forgotten_messages`, which 0018's schema has not.
            contact = Contact(channel="telegram", external_id="1401")
            session.add(contact)
            await session.flush()
            conversation = Conversation(bot="acme", channel="telegram", chat="1401", contact_id=contact.id)
            session.add(conversation)
            await session.flush()
            session.add(Message(conversation_id=conversation.id, bot="acme", channel="telegram", direction="in",
                                external_id="9401", sender="1401", text="where is my order?",
                                meta={"sender": "1401", "platform_message_id": "31"}))
        await asyncio.to_thread(upgrade, database_url)
        [again] = UpdateParser(bot_id=1).parse(_update(9401, 1401, 31)).messages
        async with sessions() as session, session.begin():
            stored = await repo.store_inbound(session, bot="acme", message=again)
        assert stored.duplicate
        async with sessions() as session:
            assert await session.scalar(select(func.count()).select_from(Message)) == 1
    finally:
        await engine.dispose()
