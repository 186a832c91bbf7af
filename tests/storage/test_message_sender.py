"""Every inbound message names its sender in a column of its own (`messages.sender`, migration 0016), which
the retention purge and `gateway forget` look people up by: `meta->>'sender'` has no index, and the purge's
look-up read every message once per contact."""

from __future__ import annotations

import asyncio
import importlib.util

from sqlalchemy import inspect, select, text

from gateway.models import ConversationRef, InboundMessage, Sender
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message
from tests.conftest import ROOT, upgrade
from tests.storage.old_rows import old_message, store_old


async def test_every_writer_of_an_inbound_message_records_its_sender(migrated_url) -> None:
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            stored = await repo.store_inbound(session, bot="acme", message=InboundMessage(
                channel="telegram", external_id="t1", sender=Sender(external_id="4242"),
                conversation=ConversationRef(channel="telegram", chat="-100group"), text="hello"))
            conversation = await session.get(Conversation, stored.conversation_id)
            await repo.add_outbound(session, conversation=conversation, text="hi", reply_to_id=stored.message_id)
            of = await session.get(Message, stored.message_id)
            await repo.add_edit_to_answer(session, of=of, text="hello again")
        async with sessions() as session:
            rows = (await session.execute(select(Message.direction, Message.sender, Message.meta)
                                          .order_by(Message.id))).all()
    finally:
        await engine.dispose()
    assert [(direction, sender) for direction, sender, _ in rows] == [("in", "4242"), ("out", None), ("in", "4242")]
    assert [meta.get("sender") for _, _, meta in rows] == ["4242", None, "4242"]  # meta keeps it too


def _batch() -> int:
    """0016's backfill batch size, read from the migration itself."""
    [path] = (ROOT / "alembic" / "versions").glob("0016_*.py")
    spec = importlib.util.spec_from_file_location("migration_0016", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BATCH


async def test_0016_gives_every_stored_inbound_message_its_sender_past_one_batch(database_url) -> None:
    """The backfill reads a batch at a time from the last id it read: every row of a table larger than a batch
    is filled, an outbound message (no sender) and an inbound one whose meta names none are left NULL."""
    await asyncio.to_thread(upgrade, database_url, "0015")
    n = _batch() * 2 + 7

    def message(i: int) -> dict:
        if i % 3 == 0:
            return old_message(f"m{i}", {}, direction="out")
        return old_message(f"m{i}", {"sender": f"u{i % 50}", "platform_message_id": str(i)} if i % 3 == 1
                           else {"command": "start"})

    engine = create_engine(database_url)
    try:
        await store_old(engine, [message(i) for i in range(n)])
        await engine.dispose()
        await asyncio.to_thread(upgrade, database_url)
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT external_id, sender FROM messages ORDER BY id"))).all()
            indexes = await conn.run_sync(lambda sync: {
                ix["name"]: ix["column_names"] for ix in inspect(sync).get_indexes("messages")})
    finally:
        await engine.dispose()
    assert len(rows) == n
    expected = [(f"m{i}", f"u{i % 50}" if i % 3 == 1 else None) for i in range(n)]
    assert rows == expected, [row for row, want in zip(rows, expected) if row != want][:5]
    assert indexes["ix_messages_sender"] == ["sender"]
