"""Socket Mode behind bolt's AsyncSocketModeHandler: an envelope is acked once, after its event is stored, and left
unacked (for Slack to send again) when storing or parsing fails for a reason other than its shape; no event asks
Slack anything (bolt's authorize answers from what auth.test said at start)."""

from __future__ import annotations

import asyncio
import json

from gateway.models import InboundMessage
from tests.channels.slack_helpers import SLACK_FIXTURES, fake_fixture, make_adapter  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import APP_TOKEN, FakeSlack

MENTION = json.loads((SLACK_FIXTURES / "event_callback_app_mention.json").read_text())


async def _connected(fake: FakeSlack, deliver) -> object:
    adapter = make_adapter(fake, app_token=APP_TOKEN)
    await adapter.start(deliver)
    for _ in range(300):
        if fake.sockets:
            break
        await asyncio.sleep(0.01)
    return adapter


async def _still_unacked(fake: FakeSlack, envelope_id: str, after_s: float = 0.5) -> bool:
    await asyncio.sleep(after_s)
    return envelope_id not in fake.acks


async def test_an_event_whose_store_fails_is_left_unacked_and_stored_when_slack_sends_it_again(fake: FakeSlack):
    stored: list[InboundMessage] = []
    failures = [RuntimeError("database away")]

    async def deliver(message: InboundMessage) -> None:
        if failures:
            raise failures.pop()
        stored.append(message)

    adapter = await _connected(fake, deliver)
    try:
        first = await fake.push(MENTION)
        assert await _still_unacked(fake, first) and stored == []
        again = await fake.push(MENTION)  # Slack's redelivery of the unacked envelope
        await fake.wait_for_ack(again, timeout=5)
        assert [m.external_id for m in stored] == ["Ev111"] and first not in fake.acks
    finally:
        await adapter.stop()


async def test_a_listener_failing_for_another_reason_than_the_payloads_shape_leaves_it_unacked(fake: FakeSlack,
                                                                                               monkeypatch):
    stored: list[InboundMessage] = []

    async def deliver(message: InboundMessage) -> None:
        stored.append(message)

    adapter = await _connected(fake, deliver)
    real = adapter.parse_payload

    def broken(body):
        raise RuntimeError("a bug, not the payload")

    try:
        monkeypatch.setattr(adapter, "parse_payload", broken)
        first = await fake.push(MENTION)
        assert await _still_unacked(fake, first) and stored == []
        monkeypatch.setattr(adapter, "parse_payload", real)
        again = await fake.push(MENTION)
        await fake.wait_for_ack(again, timeout=5)
        assert [m.external_id for m in stored] == ["Ev111"]
    finally:
        await adapter.stop()


async def test_each_envelope_is_stored_once_and_acked_once_and_asks_slack_nothing(fake: FakeSlack):
    stored: list[InboundMessage] = []

    async def deliver(message: InboundMessage) -> None:
        stored.append(message)

    adapter = await _connected(fake, deliver)
    try:
        calls_at_start = len(fake.calls)
        envelope = await fake.push(MENTION)
        await fake.wait_for_ack(envelope, timeout=5)
        await asyncio.sleep(0.3)  # a second ack or a second store would show by now
        assert fake.acks.count(envelope) == 1 and [m.external_id for m in stored] == ["Ev111"]
        assert fake.calls[calls_at_start:] == []  # no auth.test (nor anything else) per event
    finally:
        await adapter.stop()


async def test_the_socket_is_pinged_as_often_as_before_bolt(fake: FakeSlack):
    """slack_sdk's SocketModeClient pings every 5 s, and finds a dead connection (to open a new one) by it; bolt's
    handler builds its client with 10 s, which left a dropped socket unseen twice as long."""

    async def deliver(message: InboundMessage) -> None:
        pass

    adapter = await _connected(fake, deliver)
    try:
        assert adapter._socket.ping_interval == 5
    finally:
        await adapter.stop()
