"""In a shared conversation, a tool sees the member who sent the message, not whoever wrote there first.

A group's members each have a conversation of their own, but a forum topic (like a Slack or Discord
thread) is one conversation that several people write in, and its stored contact is only the first of
them. Tools authorize against the identity they are given, so handing them the conversation's contact
would give every member the first member's data.
"""

from __future__ import annotations

import asyncio
import json

from sqlalchemy import select

from storage.models import Message
from tests.fakes.openai_server import ToolCallSpec, Turn, model_entry
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.reliability.conftest import TG_TOKEN, running_app, telegram_request

GROUP = -1001234567890


def _update(update_id: int, user_id: int, name: str, text: str) -> bytes:
    return json.dumps({"update_id": update_id, "message": {
        "message_id": update_id, "date": 1700000000, "chat": {"id": GROUP, "type": "supergroup", "title": "Team",
                                                              "is_forum": True},
        "message_thread_id": 77, "is_topic_message": True,  # one topic: one conversation for both members
        "from": {"id": user_id, "is_bot": False, "first_name": name}, "text": text}}).encode()


async def _tool_results(services) -> list[dict]:
    async with services.sessions() as session:
        rows = (await session.scalars(select(Message).where(Message.direction == "out", Message.channel == "telegram")
                                      .order_by(Message.id))).all()
    return [call["result"] for row in rows for call in row.tool_calls]


async def test_a_tool_gets_the_sender_of_each_message_in_a_shared_topic(tmp_path, fake):
    fake.reset()
    whoami = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    question = "Which customer account does the support team have on file for me today?"
    # The second message has history, so the model first rewrites it into a standalone question.
    fake.script("primary", whoami, Turn(text="Noted."), Turn(text=question), whoami, Turn(text="Noted."))
    async with FakeTelegramAPI(TG_TOKEN) as telegram:
        bots = [{"name": "acme", "model": "primary",
                 "tools": [{"name": "whoami", "type": "python", "import_path": "tests.pipeline.sample_tools:whoami"}],
                 "channels": {"telegram": {"token": "${REL_TG_TOKEN}", "webhook_secret": "${REL_TG_SECRET}",
                                           "api_base": telegram.base_url, "respond_in_groups": "always"}}}]
        async with running_app(tmp_path, bots=bots, models=[model_entry(fake, "primary", api_key="${REL_LLM_KEY}")],
                               llm={"timeout": 10, "num_retries": 0}) as (client, services):
            for update_id, user_id, name in ((501, 111, "Ann"), (502, 222, "Ben")):
                response = await client.post("/webhooks/acme/telegram",
                                             **telegram_request(_update(update_id, user_id, name, question)))
                assert response.status_code == 200
                for _ in range(200):  # one at a time, so Ann is the topic's first writer
                    if len(await _tool_results(services)) == update_id - 500:
                        break
                    await asyncio.sleep(0.05)
            results = await _tool_results(services)
    assert results == [{"channel": "telegram", "contact": "111"}, {"channel": "telegram", "contact": "222"}]


async def test_a_sender_whose_contact_row_is_gone_is_still_the_sender(tmp_path):
    """Retention or a deletion request may remove a member's contact row while their message waits:
    the tool must still get that member, never fall back to the group's first writer."""
    from storage.engine import create_engine, session_factory
    from storage.models import Base, Contact, Conversation
    from storage.repositories import conversation_and_sender

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    async with session_factory(engine)() as session:
        first = Contact(channel="telegram", external_id="111", display_name="Ann")
        session.add(first)
        await session.flush()
        group = Conversation(bot="acme", channel="telegram", chat="-100", contact_id=first.id)
        session.add(group)
        await session.flush()
        inbound = Message(channel="telegram", conversation_id=group.id, meta={"sender": "222"})
        conversation, sender, _ = await conversation_and_sender(session, inbound)
    await engine.dispose()
    assert (conversation.id, sender.external_id, sender.id) == (group.id, "222", None)
