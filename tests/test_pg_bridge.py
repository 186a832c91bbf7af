"""The PostgreSQL bridge's own rules: which URLs it applies to, and how outgoing events are sent
(the cross-process behaviour itself runs in tests/scale/test_roles.py with real processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from structlog.testing import capture_logs

from gateway.events import EventBus
from gateway.pg_bridge import TOKEN_BATCH_CHARS, PgBridge


def test_bridge_applies_to_every_postgresql_spelling_and_not_sqlite():
    for url in ("postgresql://root@127.0.0.1:5432/test", "postgresql+asyncpg://u:p@db/gw", "postgres://db/gw"):
        assert PgBridge.applies_to(url), url
        assert PgBridge(url, sessions=None, bus=EventBus(), wake=None).dsn.startswith("postgresql://")
    assert not PgBridge.applies_to("sqlite+aiosqlite:///var/gateway.db")


async def until(condition, what: str, timeout: float = 10.0) -> None:
    """Until `condition()` holds; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class _RecordingSessions:
    """Stands in for the session factory: records each NOTIFY payload instead of sending it."""

    def __init__(self) -> None:
        self.payloads: list[dict] = []
        self.transactions = 0

    def __call__(self):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def begin(self):
        self.transactions += 1
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
    await until(lambda: sender.done() or len(sessions.payloads) >= 4, "the four events NOTIFYed")
    sender.cancel()
    events = [(p["t"], p["e"]) for p in sessions.payloads]
    assert events[:2] == [("message:1", {"type": "token", "text": "Plus costs $12."}), ("conversation:1", {"type": "message"})]
    assert events[-1] == ("message:1", {"type": "done", "status": "sent"}) and len(events) == 4
    assert sessions.transactions == 1  # all four were waiting: one transaction (BEGIN and COMMIT), not four
    # What comes back from LISTEN is republished here only when another process sent it.
    received = []
    bus.forwarder = None
    async with bus.subscribe("message:1") as queue:
        bridge._received(None, 0, "gateway_events", json.dumps({"o": bridge.origin, "t": "message:1", "e": {"type": "done"}}))
        bridge._received(None, 0, "gateway_events", json.dumps({"o": "another", "t": "message:1", "e": {"type": "done"}}))
        while not queue.empty():
            received.append(queue.get_nowait())
    assert received == [{"type": "done"}]


async def test_a_turns_events_go_in_one_transaction_and_later_ones_in_the_next():
    """A finished turn publishes "done" and "message" at once: each was a transaction of its own, three
    round trips an event on every message."""
    sessions, bus = _RecordingSessions(), EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=sessions, bus=bus, wake=None)
    bus.forwarder = bridge._forward
    sender = asyncio.create_task(bridge._send())
    bus.publish("message:7", {"type": "done", "status": "done"})
    bus.publish("conversation:3", {"type": "message"})
    await until(lambda: sender.done() or len(sessions.payloads) >= 2, "the turn's two events NOTIFYed")
    bus.publish("conversation:3", {"type": "message", "status": "sent"})
    await until(lambda: sender.done() or len(sessions.payloads) >= 3, "the later event NOTIFYed")
    sender.cancel()
    assert [p["t"] for p in sessions.payloads] == ["message:7", "conversation:3", "conversation:3"]
    assert sessions.transactions == 2


class _FreezableProxy:
    """A TCP relay to PostgreSQL whose connections can go silent, as across a failover or a partition:
    the sockets stay open and nothing more passes. Connections opened later pass as usual."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.frozen_below = 0  # connections numbered below this pass nothing
        self.opened = 0
        self.server: asyncio.Server | None = None
        self.relays: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self.frozen_below = self.opened

    async def close(self) -> None:
        self.server.close()
        for task in self.relays:
            task.cancel()
        await asyncio.gather(*self.relays, return_exceptions=True)

    async def _relay(self, reader, writer) -> None:
        number, self.opened = self.opened, self.opened + 1
        self.relays.add(asyncio.current_task())
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)

        async def pump(source, sink) -> None:
            while data := await source.read(65536):
                while number < self.frozen_below:
                    await asyncio.sleep(3600)  # silent: no data, no close
                sink.write(data)
                await sink.drain()

        await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer), return_exceptions=True)


async def test_a_listen_connection_gone_silent_is_replaced_and_hears_other_processes_again(postgres_url, monkeypatch):
    """A failover or a partition leaves the LISTEN socket open and silent: it was waited on while it
    was not closed, forever, and no event of another process reached this one until a restart."""
    import asyncpg
    from sqlalchemy.engine import make_url

    import gateway.pg_bridge as pg_bridge

    monkeypatch.setattr(pg_bridge, "RECONNECT_S", 0.3)
    url = make_url(postgres_url)
    proxy = _FreezableProxy(url.host, url.port or 5432)
    port = await proxy.start()
    bus = EventBus()
    bridge = PgBridge(url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False),
                      sessions=None, bus=bus, wake=None)
    listening = asyncio.create_task(bridge._listen())
    direct = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False))
    payload = json.dumps({"o": "another process", "t": "conversation:7", "e": {"type": "message"}})
    try:
        async with bus.subscribe("conversation:7") as queue:
            async def heard_within(seconds: float) -> bool:
                for _ in range(int(seconds / 0.2)):
                    await direct.execute("SELECT pg_notify('gateway_events', $1)", payload)
                    try:
                        await asyncio.wait_for(queue.get(), 0.2)
                        return True
                    except asyncio.TimeoutError:
                        pass
                return False

            assert await heard_within(10)
            proxy.freeze()
            assert await heard_within(10)  # through a new connection
    finally:
        listening.cancel()
        await asyncio.wait([listening], timeout=5)  # a goodbye on a silent connection would wait forever
        listening.cancel()
        await direct.close()
        await proxy.close()


@contextlib.asynccontextmanager
async def events_heard(postgres_url: str):
    """The topics of the events NOTIFYed on `gateway_events` while in the block, as another process hears them."""
    import asyncpg
    from sqlalchemy.engine import make_url

    heard: list[str] = []
    direct = await asyncpg.connect(make_url(postgres_url).set(drivername="postgresql")
                                   .render_as_string(hide_password=False))
    await direct.add_listener("gateway_events", lambda *args: heard.append(json.loads(args[3])["t"]))
    try:
        yield heard
    finally:
        await direct.close()


async def send_until_heard(bridge: PgBridge, heard: list[str], count: int) -> None:
    """Run the bridge's sender until `count` events are heard (5 s at most)."""
    sender = asyncio.create_task(bridge._send())
    for _ in range(50):
        if len(heard) >= count:
            break
        await asyncio.sleep(0.1)
    sender.cancel()


async def test_identical_events_waiting_together_all_reach_the_other_processes(postgres_url):
    """PostgreSQL delivers one NOTIFY of a transaction's identical ones (same channel and payload): two
    equal events of a batch ("message" twice for a conversation, a token repeated) reached the other
    processes once."""
    from storage.engine import create_engine, session_factory

    engine = create_engine(postgres_url)
    bridge = PgBridge(postgres_url, sessions=session_factory(engine), bus=EventBus(), wake=None)
    try:
        async with events_heard(postgres_url) as heard:
            for topic in ("conversation:3", "conversation:3", "message:1", "conversation:3"):
                bridge._forward(topic, {"type": "message"})
            await send_until_heard(bridge, heard, 4)
        assert heard == ["conversation:3", "conversation:3", "message:1", "conversation:3"]
    finally:
        await engine.dispose()


async def test_half_an_emoji_in_a_streamed_token_does_not_stop_the_sender():
    """A model's stream can split an emoji's two surrogates between chunks: the payload could not be
    encoded to UTF-8, the sender task died, and no later event reached the other processes."""
    sessions, bus = _RecordingSessions(), EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=sessions, bus=bus, wake=None)
    bus.forwarder = bridge._forward
    sender = asyncio.create_task(bridge._send())
    bus.publish("message:1", {"type": "token", "text": "Done \ud83d"})
    await until(lambda: sender.done() or len(sessions.payloads) >= 1, "the half emoji's token NOTIFYed")
    bus.publish("message:1", {"type": "done", "status": "sent"})
    await until(lambda: sender.done() or len(sessions.payloads) >= 2, "the next event NOTIFYed")
    assert not sender.done()
    sender.cancel()
    assert [p["e"] for p in sessions.payloads] == [{"type": "token", "text": "Done \ud83d"},
                                                   {"type": "done", "status": "sent"}]


class _FailingSessions(_RecordingSessions):
    async def execute(self, _statement, params):
        raise ConnectionResetError("the server closed the connection")


async def send_three_events(sessions) -> tuple[list[dict], bool]:
    """Three events published on a bridge sending through `sessions`: (its logs, whether its sender was
    still running after them)."""
    bus = EventBus()
    bridge = PgBridge("postgresql://db/gw", sessions=sessions, bus=bus, wake=None)
    bus.forwarder = bridge._forward
    for n in range(3):
        bus.publish(f"conversation:{n}", {"type": "message"})
    with capture_logs() as logs:
        sender = asyncio.create_task(bridge._send())
        await until(lambda: sender.done() or len(sessions.payloads) >= 3
                    or any(e["event"] == "pg_bridge.notify_failed" for e in logs), "the three events sent or lost")
        running = not sender.done()
        sender.cancel()
    return logs, running


async def test_a_failed_notify_says_how_many_events_it_lost_and_the_sender_goes_on():
    logs, running = await send_three_events(_FailingSessions())
    assert running  # still there for the next events
    [failed] = [e for e in logs if e["event"] == "pg_bridge.notify_failed"]
    assert failed["events_lost"] == 3 and "ConnectionResetError" in failed["error"]
