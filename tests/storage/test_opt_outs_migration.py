"""Migration 0017 moves each contact's STOP (`contacts.opted_out_at`, shared by every bot) to `opt_outs`, one per
bot: every bot that has a conversation with them, or that they wrote to, keeps it; one with neither holds for all."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from sqlalchemy import column, select, table, text

from storage.engine import create_engine, session_factory
from storage.models import OptOut
from storage.opt_outs import opt_in, opted_out_at
from tests.conftest import upgrade

_CONTACTS = table("contacts", *map(column, ("id", "channel", "external_id", "display_name", "created_at",
                                            "last_inbound_at", "opted_out_at")))
_CONVERSATIONS = table("conversations", *map(column, (
    "id", "bot", "channel", "workspace", "chat", "thread", "contact_id", "state", "unanswered_turns", "created_at",
    "updated_at")))
STOP = datetime(2026, 11, 1, 9, 30, tzinfo=timezone.utc)


async def _store_at_0016(engine) -> None:
    """Ann stopped (conversations with alpha and beta), Bob stopped (only wrote in a group of gamma's), Cy stopped
    and was forgotten (no conversation), Dee never stopped (a conversation with alpha)."""
    now = datetime.now(timezone.utc)
    people = [(1, "15550001", STOP), (2, "15550002", STOP + timedelta(hours=1)), (3, "15550003", STOP), (4, "15550004", None)]
    async with engine.begin() as conn:
        await conn.execute(_CONTACTS.insert(), [
            {"id": i, "channel": "whatsapp", "external_id": user, "display_name": "", "created_at": now,
             "last_inbound_at": now, "opted_out_at": stop} for i, user, stop in people])
        await conn.execute(_CONVERSATIONS.insert(), [
            {"id": i, "bot": bot, "channel": "whatsapp", "workspace": "", "chat": chat, "thread": "", "contact_id": contact,
             "state": "bot", "unanswered_turns": 0, "created_at": now, "updated_at": now}
            for i, bot, chat, contact in ((1, "alpha", "whatsapp:+15550001", 1), (2, "beta", "whatsapp:+15550001", 1),
                                          (3, "gamma", "group", 4), (4, "alpha", "whatsapp:+15550004", 4))])
        await conn.execute(text(
            "INSERT INTO messages (conversation_id, bot, channel, direction, author, external_id, sender, text, "
            "attachments, meta, citations, tool_calls, retrieved, status, attempts, provider_ids, created_at, updated_at) "
            "VALUES (3, 'gamma', 'whatsapp', 'in', 'contact', 'w1', '15550002', 'hi', '[]', '{}', '[]', '[]', '[]', "
            "'done', 1, '[]', :now, :now)"), {"now": now})


async def test_0017_carries_each_stop_over_to_every_bot_of_the_contact_and_back(database_url) -> None:
    from alembic import command

    from gateway.preflight import alembic_config

    await asyncio.to_thread(upgrade, database_url, "0016")
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        await _store_at_0016(engine)
        await engine.dispose()
        await asyncio.to_thread(upgrade, database_url)
        async with sessions() as session:
            rows = sorted((o.contact_id, o.bot, o.opted_out_at == (STOP + timedelta(hours=1) if o.contact_id == 2 else STOP))
                          for o in (await session.execute(select(OptOut))).scalars())
            assert rows == [(1, "alpha", True), (1, "beta", True), (2, "gamma", True), (3, "", True)]
            # Cy's STOP, of no bot known, holds for every bot, until a START to any.
            assert await opted_out_at(session, bot="delta", contact_id=3) is not None
            assert await opted_out_at(session, bot="alpha", contact_id=4) is None
        async with sessions() as session, session.begin():
            await opt_in(session, bot="beta", contact_id=1)
            await opt_in(session, bot="delta", contact_id=3)
        async with sessions() as session:
            assert [await opted_out_at(session, bot=b, contact_id=c) is not None
                    for b, c in (("alpha", 1), ("beta", 1), ("delta", 3))] == [True, False, False]
        await engine.dispose()
        await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0016")
        async with engine.connect() as conn:  # each contact's earliest STOP left, for every bot again
            back = (await conn.execute(text("SELECT id, opted_out_at IS NOT NULL FROM contacts ORDER BY id"))).all()
        assert [tuple(row) for row in back] == [(1, True), (2, True), (3, False), (4, False)]
    finally:
        await engine.dispose()


async def test_a_gateway_older_than_0017_still_running_reads_each_stop_in_contacts(database_url) -> None:
    """Migrations only add (a rolled-back gateway is let run on a newer schema, `require_schema`): 0017 dropped
    `contacts.opted_out_at`, and an older gateway's every contact read failed. It stays, set while the contact
    has a STOP to any bot (the older gateway then sends them nothing, the safe side), cleared with the last."""
    from storage.opt_outs import opt_out

    await asyncio.to_thread(upgrade, database_url)
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    now = datetime.now(timezone.utc)

    async def seen_by_an_older_gateway() -> bool:
        async with engine.connect() as conn:
            return await conn.scalar(text("SELECT opted_out_at IS NOT NULL FROM contacts WHERE id = 1"))

    try:
        async with engine.begin() as conn:
            await conn.execute(_CONTACTS.insert(), [{"id": 1, "channel": "whatsapp", "external_id": "15550001",
                                                     "display_name": "", "created_at": now, "last_inbound_at": now}])
        seen = []
        for change, bot in ((opt_out, "alpha"), (opt_out, "beta"), (opt_in, "alpha"), (opt_in, "beta")):
            async with sessions() as session, session.begin():
                await (change(session, bot=bot, contact_id=1, at=now) if change is opt_out
                       else change(session, bot=bot, contact_id=1))
            seen.append(await seen_by_an_older_gateway())
        assert seen == [True, True, True, False]
    finally:
        await engine.dispose()
