"""A delivery receipt applied while `gateway forget` erases its contact, on PostgreSQL (SQLite's one writer holds
no row): one waits for the other, never "deadlock detected"; and, on both, what that order costs a receipt."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select, update

from gateway.delivery.receipts import record_receipt
from gateway.models import utcnow
from gateway.retention import forget_contact
from storage.engine import create_engine, session_factory
from storage.models import Contact, Delivery, Message
from tests.conftest import upgrade
from tests.pausing import pausing_sessions
from tests.statement_log import StatementLog
from tests.storage.test_receipts import _reply_with_parts
from tests.worker_rig import until_waiting_for_a_lock


@pytest.mark.parametrize(("status", "error_code", "held"), [
    # The receipt locked the part, then updated the reply; forget deleted the reply (its parts cascade).
    ("delivered", None, "deliveries"),
    # A 21610 marks the contact opted out after the reply: forget locks the contact first.
    ("failed", "21610", "messages"),
])
async def test_a_receipt_applied_as_its_contact_is_forgotten_waits_instead_of_deadlocking(
        postgres_url, status, error_code, held):
    await asyncio.to_thread(upgrade, postgres_url)
    engine = create_engine(postgres_url)
    sessions = session_factory(engine)
    forgetting: list[asyncio.Task] = []

    async def forget_meanwhile():
        forgetting.append(asyncio.create_task(forget_contact(sessions, channel="whatsapp", user="+1")))
        await until_waiting_for_a_lock(engine)  # forget holds what it could take, and waits for the rest

    try:
        reply_id = await _reply_with_parts(sessions, ["SM-1"])
        async with sessions() as session, session.begin():  # sent after the customer's last message
            await session.execute(update(Message).where(Message.id == reply_id).values(sent_at=utcnow()))
        # The receipt stops once it holds the row `held` names, and forget runs until it waits.
        await asyncio.wait_for(record_receipt(pausing_sessions(engine, forget_meanwhile, after_locking=held),
                                              bot="acme", channel="whatsapp", provider_id="SM-1", status=status,
                                              error_code=error_code), 30)
        report = await asyncio.wait_for(forgetting[0], 30)
        assert (report.conversations, report.messages) == (1, 2)
        # The receipt went first: a 21610 is kept as the contact's opt-out, all they leave behind.
        assert (report.contacts, report.opt_outs_kept) == ((0, 1) if error_code else (1, 0))
        async with sessions() as session:
            assert [(await session.execute(select(func.count()).select_from(model))).scalar_one()
                    for model in (Message, Delivery, Contact)] == [0, 0, 1 if error_code else 0]
    finally:
        for task in forgetting:
            task.cancel()
        await engine.dispose()


async def test_a_receipt_finds_its_part_with_its_reply_locked_in_one_statement(migrated_url):
    """Every receipt of every part pays for forget's lock order: the reply is locked by the statement that finds
    the part (a separate lock of it, after an unlocked read, was one more round trip a receipt)."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        reply_id = await _reply_with_parts(sessions, ["SM-1"])
        log = StatementLog(engine)
        await record_receipt(sessions, bot="acme", channel="whatsapp", provider_id="SM-1", status="delivered",
                             error_code=None)
        assert log.statements[:2] == ["SELECT deliveries", "SELECT deliveries"]  # the reply locked, then the part
        if engine.dialect.name == "postgresql":  # SQLite's one writer locks no row
            assert "FOR NO KEY UPDATE OF messages" in log.sql[0]  # as the update of the reply will
        assert log.statements[2:] == ["UPDATE deliveries", "SELECT deliveries", "UPDATE messages"]
        async with sessions() as session:
            assert (await session.get(Message, reply_id)).status == "delivered"
    finally:
        await engine.dispose()
