"""The relay marks of held customer messages (`gateway.operators.slack_backlog`) on SQLite and PostgreSQL: one
taker wins a mark, and a stale `posting` is taken again only as it was read."""

from __future__ import annotations

from gateway.models import ConversationRef
from gateway.operators.slack_backlog import claim_for_post, mark, take
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Message


async def test_a_relay_mark_is_taken_once(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            conversation = await repo.get_or_create_conversation(
                session, bot="acme", ref=ConversationRef(channel="web", chat="marks"), contact_id=None)
            owed = await repo.add_outbound(session, conversation=conversation, text="held")
            plain = await repo.add_outbound(session, conversation=conversation, text="from before the marks")
            owed.meta = {"platform_message_id": "p1", "relay": "owed"}
        assert await claim_for_post(sessions, owed.id) and not await claim_for_post(sessions, owed.id)
        assert await claim_for_post(sessions, plain.id)  # stored without a mark: relayed as before
        async with sessions() as session:
            meta = (await session.get(Message, owed.id)).meta
        assert meta["relay"] == "posting" and meta["platform_message_id"] == "p1"
        assert not await take(sessions, owed.id, state="posting", relay_at="2000-01-01T00:00:00+00:00")
        assert await take(sessions, owed.id, state="posting", relay_at=meta["relay_at"])
        await mark(sessions, owed.id, "done")
        async with sessions() as session:
            assert (await session.get(Message, owed.id)).meta == {"platform_message_id": "p1", "relay": "done"}
        assert not await claim_for_post(sessions, owed.id)
    finally:
        await engine.dispose()
