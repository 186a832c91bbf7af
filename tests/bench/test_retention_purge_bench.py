"""The retention purge benchmark's "before" mode runs the purge as the code before migration 0016 did."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from bench.retention_purge import before_0016
from gateway.models import ConversationRef, InboundMessage, Sender, utcnow
from gateway.retention import purge_expired
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation, Message
from tests.statement_log import StatementLog


async def test_the_purge_benchmarks_before_mode_reads_no_sender_column(migrated_url) -> None:
    # It patched the look-up of what a contact wrote elsewhere only: the purge's look-up of the writers of the
    # conversations it deletes read `messages.sender` (since fda27cc, with `meta` where it has none), which no
    # code before 0016 had, so "before" timed part of the new code.
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            await repo.store_inbound(session, bot="acme", message=InboundMessage(
                channel="telegram", external_id="m-1", conversation=ConversationRef(channel="telegram", chat="-100g"),
                sender=Sender(external_id="u1"), text="hello"))
            long_ago = utcnow() - timedelta(days=45)
            for model in (Conversation, Message, Contact):
                await session.execute(update(model).values(created_at=long_ago))
            await session.execute(update(Contact).values(last_inbound_at=long_ago))
        log = StatementLog(engine)
        with before_0016():
            report = await purge_expired(sessions, Settings(database_url=migrated_url,
                                                            bots=[{"name": "acme", "retention_days": 30}]))
    finally:
        await engine.dispose()
    assert (report.conversations, report.contacts) == (1, 1)
    by_sender = [sql for sql in log.sql if "contacts" in sql and "messages.meta" in sql]
    # The writers of the conversations deleted, and (for each of those left without one) what else they wrote.
    assert by_sender[0].startswith("SELECT DISTINCT messages.conversation_id, contacts.id") and len(by_sender) > 1
    assert not [sql for sql in log.sql if "messages.sender" in sql]
