"""Qdrant unavailable: the customer is told honestly and handed to a person; /readyz says why.

The index is configured at a Qdrant server URL where nothing listens (a dead port), as happens when
the Qdrant server is down. The app must still start, store and answer every message.
"""

from __future__ import annotations

import socket

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Escalation, Message
from tests.english_replies import SEARCH_DOWN_REPLY
from tests.reliability.conftest import running_app

pytestmark = pytest.mark.asyncio(loop_scope="module")


def dead_port() -> int:
    """A local port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("faults-qdrant")
    bots = [{"name": "acme", "channels": {"web": {}},
             "sources": [{"name": "help", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}]
    async with running_app(tmp_path, bots=bots,
                           qdrant={"url": f"http://127.0.0.1:{dead_port()}", "timeout": 2}) as (client, services):
        yield client, services


async def test_qdrant_down_customer_gets_honest_reply_and_a_person(env):
    client, services = env
    response = await client.post("/v1/bots/acme/chat", json={"session_id": "qdrant-down-1",
                                                             "text": "How much does the Plus plan cost?"})
    assert response.status_code == 200
    body = response.json()
    assert body["reply"].startswith(SEARCH_DOWN_REPLY) and body["state"] == "waiting"
    async with services.sessions() as session:
        inbound = await session.get(Message, body["message_id"])
        replies = (await session.execute(select(Message).where(
            Message.reply_to_id == inbound.id, Message.author == "bot"))).scalars().all()
        [escalation] = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == body["conversation_id"]))).scalars().all()
    assert inbound.status == "done" and [r.text for r in replies] == [SEARCH_DOWN_REPLY]
    assert escalation.reason == "knowledge base unavailable"


async def test_qdrant_down_readyz_is_503_naming_qdrant(env):
    client, _ = env
    response = await client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] == "ok" and checks["qdrant"].startswith("error")
    assert (await client.get("/healthz")).status_code == 200  # alive, just not ready
