"""A turn that fails stores why in its message's `error`, which the operator API and the console show: an
exception quoting a key the gateway holds is stored redacted, as its log line is."""

from __future__ import annotations

from sqlalchemy import select

from gateway.observability.logs import configure_logging
from storage.models import Message
from tests.worker_rig import EchoPipeline, build_worker, chat_message

KEY = "sk-turn-only-0123456789abcdef"


class Leaking(EchoPipeline):
    async def handle(self, turn):
        raise RuntimeError(f"Incorrect API key provided: {KEY}")


async def test_a_turn_that_fails_quoting_a_key_stores_its_error_redacted(migrated_url):
    configure_logging(level="WARNING", secrets=[KEY])
    engine, sessions, inbox, worker, _ = build_worker(migrated_url, Leaking())
    try:
        await inbox.accept("acme", chat_message("alice", 0))
        await worker.run_until_idle(timeout=30)
        async with sessions() as session:
            [inbound] = (await session.execute(select(Message).where(Message.direction == "in"))).scalars().all()
        assert inbound.status == "failed" and inbound.error == "Incorrect API key provided: [REDACTED]"
    finally:
        configure_logging(level="WARNING")
        await engine.dispose()
