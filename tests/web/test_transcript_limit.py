"""Reads of a web chat session's answers (transcript GETs, retries of a stored message_id) are limited per
session and per client address, far above the widget's own polling; a request waiting for an answer reads the
store now and then, not twice a second."""

from __future__ import annotations

import asyncio
import re
import socket
import uuid

import httpx
import pytest
from sqlalchemy import event, update

from gateway.channel_settings import WebChannel
from gateway.events import message_topic
from gateway.http.webchat import STORE_RECHECK_MAX_S, wait_for_reply
from storage.models import Message
from tests.conftest import ROOT, app_client

REDIS_URL = "redis://127.0.0.1:6379/7"
FAST_WORKER = {"lease_seconds": 3, "poll_interval": 0.2}


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(params=["memory", "redis"])
def limiter_store(request) -> dict:
    """The app's `redis_url` (none: the in-process counters)."""
    if request.param == "memory":
        return {}
    if not redis_up():
        pytest.skip("Redis unreachable at " + REDIS_URL)
    return {"redis_url": REDIS_URL}


def session() -> str:
    return "web-" + uuid.uuid4().hex  # fresh counters on a Redis that keeps the last minute's


def from_address(client: httpx.AsyncClient, address: str) -> httpx.AsyncClient:
    """Another client of the same app whose connections come from `address`."""
    transport = httpx.ASGITransport(app=client._transport.app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60)


async def test_transcript_reads_over_the_session_or_address_limit_get_429_with_retry_after(tmp_path,
                                                                                          limiter_store) -> None:
    bot = {"name": "acme", "channels": {"web": {"transcript_per_session_per_minute": 3,
                                                "transcript_per_address_per_minute": 5}}}
    async with app_client(tmp_path, bots=[bot], start_worker=False, **limiter_store) as client:
        # Addresses of their own: a Redis run a minute ago left its counts for the same bot.
        one, other = f"198.51.100.{uuid.uuid4().int % 250 + 1}", f"203.0.113.{uuid.uuid4().int % 250 + 1}"
        async with from_address(client, one) as visitor, from_address(client, other) as neighbour:
            first, second = session(), session()
            statuses = [(await visitor.get(f"/v1/bots/acme/sessions/{first}/messages")).status_code for _ in range(4)]
            over = await visitor.get(f"/v1/bots/acme/sessions/{first}/messages")
            # The same address, another session: the address has 5, of which the first session used 3.
            more = [(await visitor.get(f"/v1/bots/acme/sessions/{second}/messages")).status_code for _ in range(3)]
            elsewhere = await neighbour.get(f"/v1/bots/acme/sessions/{session()}/messages")
        metrics = (await client.get("/metrics")).text
    assert statuses == [200, 200, 200, 429]
    assert over.status_code == 429 and 1 <= int(over.headers["Retry-After"]) <= 60
    assert re.fullmatch(r"this conversation was read too often in the last minute; try again in \d+ s",
                        over.json()["error"])
    assert more == [200, 200, 429]  # the refused reads of the first session did not use up the address
    assert elsewhere.status_code == 200
    assert 'gateway_rate_limited_total{bot="acme",scope="transcript"} 3.0' in metrics


async def test_retries_of_a_stored_message_count_as_reads_and_their_429_says_it_is_stored(tmp_path,
                                                                                          limiter_store) -> None:
    bot = {"name": "acme", "channels": {"web": {"transcript_per_session_per_minute": 2}}}
    worker = {**FAST_WORKER, "reply_timeout": 0.5}
    async with app_client(tmp_path, bots=[bot], start_worker=False, worker=worker, **limiter_store) as client:
        async with from_address(client, f"192.0.2.{uuid.uuid4().int % 250 + 1}") as visitor:
            body = {"session_id": session(), "message_id": "m-1", "text": "Is there a student discount?"}
            first = await visitor.post("/v1/bots/acme/chat", json=body)  # stored; no worker, so pending
            retries = [await visitor.post("/v1/bots/acme/chat", json=body) for _ in range(3)]
            transcript = await visitor.get(f"/v1/bots/acme/sessions/{body['session_id']}/messages")
    assert first.status_code == 202 and first.json()["pending"] is True
    assert [r.status_code for r in retries] == [202, 202, 429]
    assert retries[2].json()["stored"] is True and int(retries[2].headers["Retry-After"]) >= 1
    assert transcript.status_code == 429  # the same session's budget


async def test_the_widgets_polling_stays_far_below_the_default_limits() -> None:
    widget = (ROOT / "gateway" / "static" / "widget.js").read_text(encoding="utf-8")
    poll_ms = int(re.search(r"var POLL_MS = (\d+);", widget).group(1))
    per_tab = 60_000 / poll_ms
    defaults = WebChannel()
    assert defaults.transcript_per_session_per_minute >= 4 * per_tab  # four tabs on one session, and sends
    assert defaults.transcript_per_address_per_minute >= 20 * per_tab  # an office's visitors behind one NAT


async def test_a_waiting_request_reads_the_store_seldom_and_wakes_on_the_answers_event(tmp_path) -> None:
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False,
                          worker={**FAST_WORKER, "reply_timeout": 0.2}) as client:
        svc = client.services
        stored = (await client.post("/v1/bots/acme/chat",
                                    json={"session_id": session(), "text": "Is there a student discount?"})).json()
        message_id = stored["message_id"]
        reads = []

        def count(conn, cursor, statement, *args) -> None:
            if "messages.status" in statement and statement.lstrip().upper().startswith("SELECT"):
                reads.append(statement)

        event.listen(svc.engine.sync_engine, "before_cursor_execute", count)
        try:
            pending = await wait_for_reply(svc, message_id, timeout=6)
            assert pending["pending"] is True
            # It was 2 a second (14 in 6 s); now at 0, 0.5, 1.5, 3.5 and 6 s.
            assert 3 <= len(reads) <= 6, len(reads)

            waiter = asyncio.create_task(wait_for_reply(svc, message_id, timeout=20))
            await asyncio.sleep(2.0)  # its store reads are 2 s apart by now, the next at 3.5 s
            async with svc.sessions() as db, db.begin():
                await db.execute(update(Message).where(Message.id == message_id).values(status="answered"))
            answered_at = asyncio.get_running_loop().time()
            svc.bus.publish(message_topic(message_id), {"type": "done", "status": "answered"})
            answer = await waiter
            assert asyncio.get_running_loop().time() - answered_at < 0.3
            assert "pending" not in answer
        finally:
            event.remove(svc.engine.sync_engine, "before_cursor_execute", count)


async def test_an_answer_whose_event_never_comes_here_is_found_by_the_store_reads_within_their_4_s(tmp_path) -> None:
    # Another replica's worker wrote it and its event was lost (a PostgreSQL LISTEN connection that dropped):
    # only the store reads find it, at most STORE_RECHECK_MAX_S apart however long the request has waited.
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False,
                          worker={**FAST_WORKER, "reply_timeout": 0.2}) as client:
        svc = client.services
        stored = (await client.post("/v1/bots/acme/chat",
                                    json={"session_id": session(), "text": "Do you ship to Norway?"})).json()
        message_id = stored["message_id"]
        waiter = asyncio.create_task(wait_for_reply(svc, message_id, timeout=30))
        await asyncio.sleep(8.0)  # its reads are 4 s apart by now
        async with svc.sessions() as db, db.begin():
            await db.execute(update(Message).where(Message.id == message_id).values(status="answered"))
        answered_at = asyncio.get_running_loop().time()
        answer = await asyncio.wait_for(waiter, timeout=10)
        assert asyncio.get_running_loop().time() - answered_at <= STORE_RECHECK_MAX_S + 0.5
        assert "pending" not in answer
        assert not svc.bus._subscribers  # the wait's subscription is gone with it
