"""The foreign keys that queries and deletions look rows up by are indexed (migration 0011), on both databases."""

from __future__ import annotations

import asyncio

from sqlalchemy import inspect, select, text
from sqlalchemy.dialects import postgresql

from gateway.models import ConversationRef, InboundMessage, Sender
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Message
from tests.conftest import upgrade

FOREIGN_KEY_INDEXES = {
    ("messages", "ix_messages_reply_to"): ["reply_to_id"],
    ("usage", "ix_usage_message"): ["message_id"],
    ("usage", "ix_usage_conversation"): ["conversation_id"],
    ("escalations", "ix_escalations_conversation"): ["conversation_id", "id"],
    ("escalation_events", "ix_escalation_events_conversation"): ["conversation_id"],
    ("conversations", "ix_conversations_contact"): ["contact_id"],
}


async def _indexes(url: str) -> dict[tuple[str, str], list[str]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: {
                (table, ix["name"]): ix["column_names"] for table in {t for t, _ in FOREIGN_KEY_INDEXES}
                for ix in inspect(sync).get_indexes(table)})
    finally:
        await engine.dispose()


async def test_the_foreign_keys_lookups_use_are_indexed_and_the_migration_goes_down_and_up_again(database_url):
    await asyncio.to_thread(upgrade, database_url)
    found = await _indexes(database_url)
    assert {key: found.get(key) for key in FOREIGN_KEY_INDEXES} == FOREIGN_KEY_INDEXES
    await asyncio.to_thread(_downgrade, database_url, "0010")
    assert not set(FOREIGN_KEY_INDEXES) & set(await _indexes(database_url))
    await asyncio.to_thread(upgrade, database_url)
    assert {key: (await _indexes(database_url)).get(key) for key in FOREIGN_KEY_INDEXES} == FOREIGN_KEY_INDEXES


def _downgrade(url: str, revision: str) -> None:
    from alembic import command

    from gateway.preflight import alembic_config

    command.downgrade(alembic_config(url), revision)


async def test_the_web_chats_lookup_of_a_messages_replies_is_served_by_the_index_on_postgres(postgres_url):
    """It read every outbound message (the (direction, status) index) for each web chat message."""
    await asyncio.to_thread(upgrade, postgres_url)
    query = select(Message).where(Message.reply_to_id == 42, Message.direction == "out").order_by(Message.id)
    sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    engine = create_engine(postgres_url)
    try:
        async with engine.connect() as conn:
            # An empty table is scanned whatever its indexes: say what a large one would do.
            await conn.execute(text("SET enable_seqscan = off"))
            plan = "\n".join(row[0] for row in await conn.execute(text(f"EXPLAIN {sql}")))
    finally:
        await engine.dispose()
    assert "ix_messages_reply_to" in plan, plan




async def test_forgets_look_up_of_a_sender_kept_in_meta_alone_is_served_by_an_index_on_postgres(postgres_url):
    """`gateway forget` reads `meta.sender` of the inbound messages a gateway older than 0016 stored with no
    `sender`; every outbound row has none either, so without an index of the former it read all inbound rows
    (`ix_messages_status`) with their `meta` parsed."""
    from gateway.retention import _sent_by

    await asyncio.to_thread(upgrade, postgres_url)
    engine = create_engine(postgres_url)
    try:
        async with session_factory(engine)() as session, session.begin():
            first = await repo.store_inbound(session, bot="acme", message=InboundMessage(
                channel="telegram", external_id="m0", sender=Sender(external_id="u0"),
                conversation=ConversationRef(channel="telegram", chat="-100a"), text="hi"))
        async with engine.begin() as conn:  # 20,000 more, half of them outbound; statistics for the planner
            await conn.execute(text(
                "INSERT INTO messages (conversation_id, bot, channel, direction, author, external_id, sender, text, "
                "attachments, meta, citations, tool_calls, retrieved, status, attempts, provider_ids, created_at, "
                "updated_at) SELECT conversation_id, bot, channel, CASE WHEN g % 2 = 0 THEN 'in' ELSE 'out' END, "
                "author, 'm' || g, CASE WHEN g % 2 = 0 THEN 'u' || (g % 500) END, text, attachments, meta, citations, "
                "tool_calls, retrieved, status, attempts, provider_ids, created_at, updated_at "
                "FROM messages, generate_series(1, 20000) AS g WHERE messages.id = :first"),
                {"first": first.message_id})
            await conn.execute(text("ANALYZE messages"))
        query = select(Message.id).where(_sent_by("telegram", "ann"))
        sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
        async with engine.connect() as conn:
            plan = "\n".join(row[0] for row in await conn.execute(text(f"EXPLAIN {sql}")))
    finally:
        await engine.dispose()
    assert "ix_messages_sender_unknown" in plan and "Seq Scan" not in plan, plan
