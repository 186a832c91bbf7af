"""The PostgreSQL bridge's own rules: which URLs it applies to, and how outgoing events are sent
(the cross-process behaviour itself runs in tests/scale/test_roles.py with real processes)."""

from __future__ import annotations

import asyncio
import json

from gateway.events import EventBus
from gateway.pg_bridge import TOKEN_BATCH_CHARS, PgBridge


def test_bridge_applies_to_every_postgresql_spelling_and_not_sqlite():
    for url in ("postgresql://root@127.0.0.1:5432/test", "postgresql+asyncpg://u:p@db/gw", "postgres://db/gw"):
        assert PgBridge.applies_to(url), url
        assert PgBridge(url, sessions=None, bus=EventBus(), wake=None).dsn.startswith("postgresql://")
    assert not PgBridge.applies_to("sqlite+aiosqlite:///var/gateway.db")


class _RecordingSessions:
    """Stands in for the session factory: records each NOTIFY payload instead of sending it."""

    def __init__(self) -> None:
        self.payloads: list[dict] = []

    def __call__(self):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def begin(self):
        return self

    async def execute(self, _statement, params):
        self.payloads.append(json.loads(params["payload"]))


async def test_bridge_joins_waiting_tokens_keeps_order_and_skips_its_own_echo():
    sessions, bus = _RecordingSessions(), EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=sessions, bus=bus, wake=None)
    bus.forwarder = bridge._forward  # as start() does, without the LISTEN connection
    for piece in ("Plus ", "costs ", "$12."):
        bus.publish("message:1", {"type": "token", "text": piece})
    bus.publish("conversation:1", {"type": "message"})
    bus.publish("message:1", {"type": "token", "text": "x" * (TOKEN_BATCH_CHARS + 10)})
    bus.publish("message:1", {"type": "done", "status": "sent"})
    sender = asyncio.create_task(bridge._send())
    await asyncio.sleep(0.05)
    sender.cancel()
    events = [(p["t"], p["e"]) for p in sessions.payloads]
    assert events[:2] == [("message:1", {"type": "token", "text": "Plus costs $12."}), ("conversation:1", {"type": "message"})]
    assert events[-1] == ("message:1", {"type": "done", "status": "sent"}) and len(events) == 4
    # What comes back from LISTEN is republished here only when another process sent it.
    received = []
    bus.forwarder = None
    async with bus.subscribe("message:1") as queue:
        bridge._received(None, 0, "gateway_events", json.dumps({"o": bridge.origin, "t": "message:1", "e": {"type": "done"}}))
        bridge._received(None, 0, "gateway_events", json.dumps({"o": "another", "t": "message:1", "e": {"type": "done"}}))
        while not queue.empty():
            received.append(queue.get_nowait())
    assert received == [{"type": "done"}]
