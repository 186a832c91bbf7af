"""The database goes away right after a send reached the platform: the reply is recorded, not resent.

This is the narrowest window of a PostgreSQL restart, made deterministic and kept to this test's own
database: while the fake Bot API is accepting the send, the test database stops accepting connections
(ALLOW_CONNECTIONS false + terminating its backends) for several seconds. The shared server keeps
running, so this runs wherever PostgreSQL is reachable (always under CI=true).
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Message
from tests.conftest import _pg_admin_dsn, drop_postgres, fresh_postgres_url
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.gateway_channels.conftest import settle, wait_until
from tests.reliability.conftest import (
    TG_TOKEN,
    running_app,
    telegram_channel,
    telegram_request,
    telegram_update,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
OUTAGE_S = 8.0  # longer than two leases (3 s each in tests): the stalled-send requeue gets its chance


async def _admin(sql: str, *args) -> list:
    conn = await asyncpg.connect(_pg_admin_dsn(), timeout=5)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


class OutageTelegramAPI(FakeTelegramAPI):
    """Accepts a sendMessage, then takes the gateway's database away before answering."""

    database = ""
    outage_for_chat: int | None = None
    reopening: asyncio.Task | None = None

    async def _m_sendmessage(self, params):
        result = await super()._m_sendmessage(params)
        if self.outage_for_chat is not None and str(params.get("chat_id")) == str(self.outage_for_chat):
            self.outage_for_chat = None
            await _admin(f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS false')
            await _admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", self.database)
            self.reopening = asyncio.create_task(self._reopen_after(OUTAGE_S))
        return result

    async def _reopen_after(self, seconds: float) -> None:
        """Let connections in again, retrying: one admin connection timing out on a busy machine kept the
        database closed for the rest of the test."""
        await asyncio.sleep(seconds)
        for _ in range(60):
            try:
                await _admin(f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS true')
                return
            except (OSError, asyncpg.PostgresError, TimeoutError):
                await asyncio.sleep(0.5)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    database_url = await asyncio.to_thread(fresh_postgres_url)
    if database_url is None:
        pytest.skip("PostgreSQL is not reachable")
    try:
        async with OutageTelegramAPI(TG_TOKEN) as telegram:
            telegram.database = database_url.rsplit("/", 1)[1]
            bots = [{"name": "acme", "channels": {"web": {}, "telegram": telegram_channel(telegram.base_url)}}]
            async with running_app(tmp_path_factory.mktemp("db-outage"), bots=bots,
                                   database_url=database_url) as (client, services):
                yield client, services, telegram
    finally:
        await _admin(f'ALTER DATABASE "{database_url.rsplit("/", 1)[1]}" ALLOW_CONNECTIONS true')
        await asyncio.to_thread(drop_postgres, database_url)


async def test_database_outage_after_platform_accepted_records_the_send_once(env):
    client, services, telegram = env
    chat = 9700
    telegram.outage_for_chat = chat
    response = await client.post("/webhooks/acme/telegram", **telegram_request(telegram_update(500001, "Hello?",
                                                                                               chat=chat)))
    assert response.status_code == 200

    async def reply_settled():
        try:
            async with services.sessions() as session:
                rows = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
        except Exception:  # the database is away for a while on purpose
            return None
        return rows if rows and all(r.status in ("sent", "failed") for r in rows) else None

    [reply] = await wait_until(reply_settled, timeout=90, what="the reply to be recorded after the outage")
    await settle(3 * 3.0)  # several lease periods: a wrongful requeue would resend now
    assert reply.status == "sent"
    assert len([m for m in telegram.sent if m.chat_id == chat]) == 1  # delivered once, never resent
