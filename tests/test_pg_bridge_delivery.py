"""What the PostgreSQL bridge does with a batch it cannot send at once: a connection dropped in the
middle of its transaction, an event too large for one NOTIFY."""

from __future__ import annotations

import asyncio
import json

from sqlalchemy import event as sa_event
from structlog.testing import capture_logs

from gateway.events import ESCALATIONS_TOPIC, EventBus
from gateway.pg_bridge import MAX_PAYLOAD, PgBridge
from tests.test_pg_bridge import _RecordingSessions, events_heard, send_three_events, send_until_heard, until


async def test_a_batch_whose_connection_is_killed_mid_transaction_is_sent_again_on_another(postgres_url):
    """PostgreSQL terminating the backend between two NOTIFYs of a batch (a restart, a failover): none of
    the batch was delivered, and all of it was lost (`events_lost`)."""
    from storage.engine import create_engine, session_factory

    engine = create_engine(postgres_url)
    killed = []

    @sa_event.listens_for(engine.sync_engine, "before_cursor_execute", retval=True)
    def _kill_at_the_second_notify(_conn, _cursor, statement, parameters, _context, _many):
        if "pg_notify" in statement and not killed and '"n": 1,' in str(parameters):
            killed.append(True)  # its own backend, by PostgreSQL: the transaction's connection is gone
            return "SELECT pg_terminate_backend(pg_backend_pid())", ()
        return statement, parameters

    bridge = PgBridge(postgres_url, sessions=session_factory(engine), bus=EventBus(), wake=None)
    try:
        async with events_heard(postgres_url) as heard:
            for n in range(3):
                bridge._forward(f"conversation:{n}", {"type": "message"})
            with capture_logs() as logs:
                await send_until_heard(bridge, heard, 3)
        assert killed
        assert heard == ["conversation:0", "conversation:1", "conversation:2"]
        assert [e["event"] for e in logs if e["event"].startswith("pg_bridge.")] == ["pg_bridge.notify_retried"]
    finally:
        await engine.dispose()


class _FailingOnceSessions(_RecordingSessions):
    """The first transaction fails at its first NOTIFY; the next ones go through."""

    async def execute(self, statement, params):
        if self.transactions == 1:
            raise ConnectionResetError("the server closed the connection")
        await super().execute(statement, params)


async def test_a_batch_failing_twice_is_reported_lost_and_one_failing_once_is_not():
    sessions = _FailingOnceSessions()
    logs, _ = await send_three_events(sessions)
    assert [p["t"] for p in sessions.payloads] == ["conversation:0", "conversation:1", "conversation:2"]
    assert not [e for e in logs if e["event"] == "pg_bridge.notify_failed"]


async def test_a_batch_received_twice_is_republished_once():
    """A commit that landed but whose answer was lost is sent again: the other processes had its events."""
    bus = EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=None, bus=bus, wake=None)
    batch = [json.dumps({"o": "other", "n": n, "t": "message:1", "e": {"type": "token", "text": f"Hi {n}"}})
             for n in (4, 5)]
    async with bus.subscribe("message:1") as queue:
        for payload in [*batch, *batch]:
            bridge._received(None, 0, "gateway_events", payload)
        # Another process (one restarted: a new origin) numbers from 0 again.
        bridge._received(None, 0, "gateway_events", json.dumps({"o": "restarted", "n": 0, "t": "message:1",
                                                                 "e": {"type": "done"}}))
        received = [queue.get_nowait() for _ in range(queue.qsize())]
    assert received == [{"type": "token", "text": "Hi 4"}, {"type": "token", "text": "Hi 5"}, {"type": "done"}]


async def test_an_event_too_large_for_a_notify_goes_with_its_text_cut_and_marked():
    """A customer's long message in an escalation (4,000 characters of Japanese: 12 kB) was dropped whole:
    no console on another replica heard of it, nor refreshed the escalation."""
    sessions, bus = _RecordingSessions(), EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=sessions, bus=bus, wake=None)
    bus.forwarder = bridge._forward
    long_text = "請求書について質問があります。" * 270
    bus.publish(ESCALATIONS_TOPIC, {"type": "customer_message", "escalation_id": 9, "bot": "acme",
                                    "conversation_id": 3, "text": long_text})
    bus.publish(ESCALATIONS_TOPIC, {"type": "claimed", "escalation_id": 9, "bot": "acme", "operator": "sam"})
    with capture_logs() as logs:
        sender = asyncio.create_task(bridge._send())
        await until(lambda: sender.done() or len(sessions.payloads) >= 2, "the two events NOTIFYed")
        sender.cancel()
    first, second = (p["e"] for p in sessions.payloads)
    assert {k: v for k, v in first.items() if k != "text"} == {
        "type": "customer_message", "escalation_id": 9, "bot": "acme", "conversation_id": 3, "truncated": True}
    assert long_text.startswith(first["text"]) and len(first["text"]) > 1000
    assert len(json.dumps({"o": bridge.origin, "n": 0, "t": ESCALATIONS_TOPIC, "e": first},
                          ensure_ascii=False).encode()) <= MAX_PAYLOAD
    assert second == {"type": "claimed", "escalation_id": 9, "bot": "acme", "operator": "sam"}
    assert [e["event"] for e in logs] == ["pg_bridge.too_large"]


def test_only_long_texts_are_cut_to_fit_and_no_further_than_a_short_value():
    from gateway.pg_bridge import SHORT_VALUE, _cut_to_fit

    event = {"type": "note", "bot": "b" * SHORT_VALUE, "text": "x" * 300}
    assert _cut_to_fit(event, 5000) == {"type": "note", "bot": "b" * SHORT_VALUE, "text": "x" * SHORT_VALUE,
                                        "truncated": True}
