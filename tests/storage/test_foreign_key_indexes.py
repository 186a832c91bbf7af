"""The foreign keys that queries and deletions look rows up by are indexed (migration 0011), on both databases."""

from __future__ import annotations

import asyncio

from sqlalchemy import inspect, select, text
from sqlalchemy.dialects import postgresql

from storage.engine import create_engine
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


