"""An id, once given, is never given again: on SQLite a table without AUTOINCREMENT handed the highest id out again
once its row was deleted, so after `gateway forget` (or the purge) of the newest conversation a new chat got its
id, and a console link, a log line or an audit note naming that conversation then named another customer's.
PostgreSQL's sequences never go back; migration 0018 makes SQLite's tables do the same."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import inspect, select, text

from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.retention import forget_contact
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import (
    Base,
    Contact,
    Conversation,
    DataDeletion,
    Delivery,
    Document,
    EarlyReceipt,
    Escalation,
    EscalationEvent,
    IngestRun,
    Message,
    OptOut,
    RemovedChat,
    UnfinishedChatMove,
    Usage,
)
from tests.conftest import upgrade

IDS = ("contact", "conversation", "message", "escalation")
AT = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


async def _chat(sessions, user: str, *, escalate: bool = True, as_models: bool = False) -> dict[str, int]:
    """A web chat of `user` (a message, escalated with one event): the ids a link or a log line names. With
    `as_models` its rows are written as models, not by `store_inbound`, which reads a table of a later schema
    (`forgotten_messages`, 0022) than an old one a test fills."""
    async with sessions() as session, session.begin():
        if as_models:
            contact = Contact(channel="web", external_id=user)
            session.add(contact)
            await session.flush()
            conversation = Conversation(bot="acme", channel="web", chat=user, contact_id=contact.id)
            session.add(conversation)
            await session.flush()
            message = Message(conversation_id=conversation.id, bot="acme", channel="web", direction="in",
                              external_id=f"{user}-1", sender=user, text="hello",
                              meta={"sender": user, "platform_message_id": f"{user}-1"})
            session.add(message)
            await session.flush()
            stored = repo.StoredInbound(message_id=message.id, conversation_id=conversation.id,
                                        contact_id=contact.id, duplicate=False)
        else:
            stored = await repo.store_inbound(session, bot="acme", message=InboundMessage(
                channel="web", external_id=f"{user}-1", conversation=ConversationRef(channel="web", chat=user),
                sender=Sender(external_id=user), text="hello"))
        ids = {"contact": stored.contact_id, "conversation": stored.conversation_id, "message": stored.message_id}
        if escalate:
            escalation = Escalation(conversation_id=stored.conversation_id, bot="acme", reason="asked for a person")
            session.add(escalation)
            await session.flush()
            session.add(EscalationEvent(escalation_id=escalation.id, conversation_id=stored.conversation_id,
                                        kind="opened", to_state="open", actor="bot"))
            ids["escalation"] = escalation.id
    return ids


async def _forget_newest_then_chat_again(sessions) -> tuple[dict[str, int], dict[str, int]]:
    """(the newest chat's ids, forgotten; the ids of the chat that comes after)."""
    gone = await _chat(sessions, "newest")
    report = await forget_contact(sessions, channel="web", user="newest")
    assert (report.contacts, report.conversations, report.messages, report.escalations) == (1, 1, 1, 1)
    return gone, await _chat(sessions, "next")


async def test_forgetting_the_newest_conversation_does_not_give_its_ids_to_the_next_chat(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        await _chat(sessions, "older")
        gone, after = await _forget_newest_then_chat_again(sessions)
    finally:
        await engine.dispose()
    assert {key: after[key] > gone[key] for key in IDS} == dict.fromkeys(IDS, True), (gone, after)


def test_a_sqlite_store_made_from_the_models_never_reuses_an_id_as_one_made_by_the_migrations(tmp_path):
    """Tests (and any tool) that make the store from the models get the migrations' AUTOINCREMENT tables too."""
    def autoincrement_tables(url: str) -> set[str]:
        engine = create_sync_engine(url)
        with engine.connect() as conn:
            found = {name for name, sql in conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
                     if "AUTOINCREMENT" in sql.upper()}
        engine.dispose()
        return found

    from_models = f"sqlite:///{tmp_path / 'models.db'}"
    engine = create_sync_engine(from_models)
    Base.metadata.create_all(engine)
    engine.dispose()
    migrated = f"sqlite+aiosqlite:///{tmp_path / 'migrated.db'}"
    upgrade(migrated)
    with_id = {table.name for table in Base.metadata.sorted_tables if "id" in table.c and table.c.id.primary_key}
    assert with_id >= {"contacts", "conversations", "messages", "escalations", "escalation_events"}
    assert autoincrement_tables(from_models) == with_id
    assert autoincrement_tables(f"sqlite:///{tmp_path / 'migrated.db'}") == with_id


async def _fill_every_table(sessions) -> None:
    """Rows in every table of 0017's schema (0018 adds no column: the models write it as it is)."""
    older = await _chat(sessions, "older", as_models=True)
    async with sessions() as session, session.begin():
        reply = Message(conversation_id=older["conversation"], bot="acme", channel="web", direction="out",
                        author="bot", reply_to_id=older["message"], text="hi", status="sent")
        unknown = Message(conversation_id=older["conversation"], bot="acme", channel="web", direction="in",
                          external_id="older-2", text="stored by a gateway older than 0016")
        session.add_all([reply, unknown])
        await session.flush()
        session.add_all([
            OptOut(contact_id=older["contact"], bot="acme", opted_out_at=AT),
            Usage(bot="acme", conversation_id=older["conversation"], message_id=reply.id, model="offline"),
            Delivery(message_id=reply.id, channel="web", provider_id="p1"),
            EarlyReceipt(channel="whatsapp", provider_id="SM1", status="delivered"),
            Document(bot="acme", source="help", doc_id="faq.md", content_hash="h", chunk_ids=["c1"]),
            IngestRun(bot="acme", source="help", errors=[{"doc": "x"}]),
            DataDeletion(kind="forget", channel="web", counts={"conversations": 1}),
            RemovedChat(bot="acme", channel="telegram", chat="-100"),
            UnfinishedChatMove(bot="acme", channel="telegram", workspace="", chat="-100", new_chat="-1001"),
        ])


async def _snapshot(engine) -> dict:
    """Every table's rows, columns, keys and indexes (a partial one's condition too)."""
    def read(sync) -> dict:
        inspector = inspect(sync)
        found = {}
        for table in sorted(set(Base.metadata.tables) & set(inspector.get_table_names())):  # a later one's not yet
            found[table] = {
                "rows": [tuple(row) for row in sync.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2"))],
                "columns": [(c["name"], str(c["type"]), c["nullable"], c["default"]) for c in inspector.get_columns(table)],
                "pk": inspector.get_pk_constraint(table)["constrained_columns"],
                "fks": sorted((fk["constrained_columns"], fk["referred_table"], fk["referred_columns"],
                               fk["options"].get("ondelete")) for fk in inspector.get_foreign_keys(table)),
                "unique": sorted((u["name"], u["column_names"]) for u in inspector.get_unique_constraints(table)),
                "indexes": sorted((i["name"], i["column_names"], i["unique"], sorted((k, str(v)) for k, v in i.get("dialect_options", {}).items()))
                                  for i in inspector.get_indexes(table)),
            }
        return found
    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_0018_keeps_every_row_key_and_index_and_ids_go_on_above_the_highest(database_url):
    await asyncio.to_thread(upgrade, database_url, "0017")
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        await _fill_every_table(sessions)
        before = await _snapshot(engine)
        await engine.dispose()
        await asyncio.to_thread(upgrade, database_url)
        after = await _snapshot(engine)
        assert {table: after[table] == before[table] for table in before} == dict.fromkeys(before, True)
        assert all(before[table]["rows"] for table in before)  # every table had rows to keep
        async with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                assert (await conn.execute(text("PRAGMA foreign_key_check"))).all() == []
                assert (await conn.execute(text("PRAGMA integrity_check"))).scalar_one() == "ok"
                partial = (await conn.execute(text(
                    "SELECT sql FROM sqlite_master WHERE name = 'ix_messages_sender_unknown'"))).scalar_one()
                assert "WHERE direction = 'in' AND sender IS NULL" in partial
            unknown = (await conn.execute(select(Message.id).where(text("direction = 'in' AND sender IS NULL")))).all()
        assert len(unknown) == 1
        gone, after_ids = await _forget_newest_then_chat_again(sessions)
    finally:
        await engine.dispose()
    assert {key: after_ids[key] > gone[key] for key in IDS} == dict.fromkeys(IDS, True), (gone, after_ids)


async def test_upgrading_again_after_a_downgrade_past_0018_keeps_the_ids_given_since(database_url):
    """The downgrade leaves the tables as they are (an older gateway runs on them as it did): the upgrade after
    it must not start their counters again from the highest id left."""
    from alembic import command

    from gateway.preflight import alembic_config

    await asyncio.to_thread(upgrade, database_url)
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        await _chat(sessions, "older")
        gone = await _chat(sessions, "newest")
        await forget_contact(sessions, channel="web", user="newest")
        await engine.dispose()
        await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0017")
        await asyncio.to_thread(upgrade, database_url)
        after = await _chat(sessions, "next")
        async with sessions() as session:
            contacts = (await session.execute(select(Contact.id))).scalars().all()
    finally:
        await engine.dispose()
    assert len(contacts) == 2
    assert {key: after[key] > gone[key] for key in IDS} == dict.fromkeys(IDS, True), (gone, after)


def test_0018_refuses_to_copy_the_tables_with_foreign_keys_on_rather_than_cascade(tmp_path):
    """Dropping the old `conversations` with foreign keys on deletes every message and escalation (ON DELETE
    CASCADE): a connection handed to Alembic with them on (not `gateway db upgrade`'s) gets an error, no loss."""
    import pytest
    from alembic import command
    from sqlalchemy import event

    from gateway.preflight import alembic_config

    url = f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    upgrade(url, "0017")
    engine = create_engine(url)
    asyncio.run(_fill_every_table(session_factory(engine)))
    asyncio.run(engine.dispose())
    sync_engine = create_sync_engine(f"sqlite:///{tmp_path / 'gateway.db'}")
    event.listen(sync_engine, "connect", lambda dbapi, _record: dbapi.execute("PRAGMA foreign_keys=ON"))
    config = alembic_config(url)
    with sync_engine.connect() as conn:
        config.attributes["connection"] = conn
        with pytest.raises(RuntimeError, match="PRAGMA foreign_keys=OFF"):
            command.upgrade(config, "head")
        conn.rollback()
        counts = [conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in ("messages", "escalations")]
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    sync_engine.dispose()
    assert (counts, version) == ([3, 1], "0017")
