"""`settle(services=…)`, the barrier every channel test's 'it was not answered' rests on, itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.models import ConversationRef, InboundMessage, Sender
from storage import repositories as repo
from storage.engine import session_factory
from storage.models import Base, Message
from tests.gateway_channels.conftest import settle


async def test_settle_waits_for_a_conversation_the_worker_leased_but_has_not_yet_started(tmp_path):
    """The worker commits its lease, then (after closing that session, an await) puts the drain in `_active`:
    in between, its message is neither claimable nor in flight by `_active`, and settle returned, so a
    message wrongly stored could pass for one not answered."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/store.db")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    sessions = session_factory(engine)
    worker = SimpleNamespace(owner="worker-1", _active={})
    services = SimpleNamespace(sessions=sessions, worker=worker)
    async with sessions() as session, session.begin():
        stored = await repo.store_inbound(session, bot="acme", message=InboundMessage(
            channel="telegram", external_id="m-1", conversation=ConversationRef(channel="telegram", chat="7"),
            sender=Sender(external_id="7"), text="a message stored by mistake"))
    async with sessions() as session, session.begin():
        assert await repo.try_lease(session, conversation_id=stored.conversation_id, owner=worker.owner, seconds=60)
    try:
        with pytest.raises(AssertionError, match="no turn in flight"):
            await settle(0, services=services, timeout=0.5)  # leased by the worker: its turn is about to start
        async with sessions() as session, session.begin():  # its turn ended: answered, the lease released
            await session.execute(update(Message).where(Message.id == stored.message_id).values(status="done"))
            await repo.release_lease(session, conversation_id=stored.conversation_id, owner=worker.owner)
        await settle(0, services=services, timeout=5)
    finally:
        await engine.dispose()
