"""Slack adapter start-up against a local fake Slack: learning the bot user and Socket Mode delivery."""

from __future__ import annotations

import asyncio
import json

import pytest
from structlog.testing import capture_logs

from channels.slack import SCOPE_EFFECTS, missing_scopes
from gateway.errors import ChannelSendError
from gateway.models import InboundMessage
from tests.channels.slack_helpers import SLACK_FIXTURES, fake_fixture, make_adapter  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import APP_TOKEN, BOT_USER_ID, FakeSlack


async def test_slack_start_learns_bot_user_for_mentions(fake: FakeSlack):
    adapter = make_adapter(fake)
    await adapter.start(_collector([]))
    body = {"type": "event_callback", "team_id": "T1", "event_id": "Ev9",
            "event": {"type": "message", "user": BOT_USER_ID, "text": "echo", "ts": "1.0", "channel": "D1",
                      "channel_type": "im"}}
    assert adapter.bot_user_id == BOT_USER_ID
    assert "own message" in adapter.parse_payload(body).ignored[0]
    await adapter.stop()


async def test_slack_start_names_each_missing_scope_and_what_it_costs(fake: FakeSlack):
    fake.scopes = ["chat:write", "groups:history", "im:history"]  # an app installed without channels:history
    adapter = make_adapter(fake)
    with capture_logs() as logs:
        await adapter.start(_collector([]))
    missing = [(entry["scope"], entry["effect"]) for entry in logs if entry["event"] == "slack.missing_scope"]
    assert missing == [("channels:history", SCOPE_EFFECTS["channels:history"])]
    assert "posted twice" in missing[0][1] and adapter.bot_user_id == BOT_USER_ID
    # Every scope granted: nothing to say. No header (a proxy dropped it): unknown is not missing.
    assert missing_scopes({"X-OAuth-Scopes": ",".join(SCOPE_EFFECTS)}) == {} and missing_scopes({}) == {}
    # users:read matters only to a bot with Slack operators (their names in the console).
    assert list(missing_scopes({"X-OAuth-Scopes": ",".join(SCOPE_EFFECTS)}, operators=True)) == ["users:read"]
    await adapter.stop()


def _collector(into: list):
    async def deliver(message: InboundMessage) -> None:
        into.append(message)

    return deliver


async def test_slack_socket_mode_delivers_and_acks(fake: FakeSlack):
    adapter = make_adapter(fake, app_token=APP_TOKEN)
    delivered: list[InboundMessage] = []
    await adapter.start(_collector(delivered))
    try:
        assert fake.calls_to("apps.connections.open")[0].token == APP_TOKEN
        for _ in range(100):
            if fake.sockets:
                break
            await asyncio.sleep(0.01)
        payload = json.loads((SLACK_FIXTURES / "event_callback_app_mention.json").read_text())
        first = await fake.push(payload)
        ignored = await fake.push(json.loads((SLACK_FIXTURES / "event_callback_reaction_added.json").read_text()))
        await fake.wait_for_ack(first)
        await fake.wait_for_ack(ignored)
        assert [m.text for m in delivered] == ["Hi there!"] and delivered[0].external_id == "Ev111"
    finally:
        await adapter.stop()
    assert adapter._socket is None


async def test_slack_socket_mode_bad_app_token_fails_fast(fake: FakeSlack):
    adapter = make_adapter(fake, app_token="xapp-wrong")
    with pytest.raises(ChannelSendError, match="invalid_auth") as raised:
        await asyncio.wait_for(adapter.start(_collector([])), timeout=30)
    # "apps.connections.open failed: invalid_auth" did not say which of the channel's two tokens was wrong.
    assert "Slack refused the app_token" in str(raised.value) and raised.value.permanent


class _ShortSleeps(list):
    """Records the backoff asked for, and waits a moment instead (a loop against a closed port)."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)
        await asyncio.sleep(0.02)


async def test_slack_socket_mode_is_opened_again_while_slack_is_down_at_start(fake: FakeSlack):
    """Slack answering 503 at start raised from `start`: the channel stayed deaf until a restart."""
    fake.fail("apps.connections.open", status=503, error="service_unavailable", times=2)
    sleeps = _ShortSleeps()
    adapter = make_adapter(fake, app_token=APP_TOKEN, sleeps=sleeps)
    delivered: list[InboundMessage] = []
    await asyncio.wait_for(adapter.start(_collector(delivered)), timeout=30)
    try:
        assert adapter.connection_status.startswith("connecting again after slack socket mode")
        for _ in range(300):
            if fake.sockets and adapter.connection_status == "connected":
                break
            await asyncio.sleep(0.01)
        assert adapter.connection_status == "connected" and sleeps == [2.0, 4.0]
        assert len(fake.calls_to("apps.connections.open")) == 3
        first = await fake.push(json.loads((SLACK_FIXTURES / "event_callback_app_mention.json").read_text()))
        await fake.wait_for_ack(first)
        assert [m.text for m in delivered] == ["Hi there!"]
    finally:
        await adapter.stop()
    assert adapter._socket is None and adapter._socket_task is None


async def test_slack_unreachable_at_start_is_retried_in_the_background_and_stop_ends_it():
    """A connection refused was a traceback from `start` (`channel.start_failed`), an unclosed session and
    a destroyed pending task, and no retry."""
    from tests.scale.replicas import free_port

    sleeps = _ShortSleeps()
    adapter = make_adapter(app_token=APP_TOKEN, api_base=f"http://127.0.0.1:{free_port()}/api/", sleeps=sleeps)
    await asyncio.wait_for(adapter.start(_collector([])), timeout=30)
    for _ in range(300):
        if {2.0, 4.0, 5.0, 10.0} <= set(sleeps):
            break
        await asyncio.sleep(0.01)
    # Socket Mode's waits (2 s, 4 s, …) beside auth.test's (5 s, 10 s, …): both are asked again.
    assert adapter.connection_status == ("connecting again after slack socket mode: Slack unreachable "
                                         "(ClientConnectorError)") and {2.0, 4.0, 5.0, 10.0} <= set(sleeps)
    await adapter.stop()
    assert adapter._socket_task is None and adapter._socket is None and adapter._identity_task is None
    assert make_adapter(api_base="http://127.0.0.1:1/api/").connection_status is None  # Events API: no socket


async def test_slack_socket_mode_acks_a_payload_it_cannot_read_and_goes_on(fake: FakeSlack):
    """What the Events API route answers with a 400 that Slack does not retry (a `text` that is no text) raised in
    the Socket Mode listener: no ack, so Slack sent it again, and the same error each time."""
    adapter = make_adapter(fake, app_token=APP_TOKEN)
    delivered: list[InboundMessage] = []
    await adapter.start(_collector(delivered))
    try:
        for _ in range(100):
            if fake.sockets:
                break
            await asyncio.sleep(0.01)
        good = json.loads((SLACK_FIXTURES / "event_callback_app_mention.json").read_text())
        bad = json.loads(json.dumps(good)) | {"event_id": "EvBad"}
        bad["event"]["text"] = 5
        with capture_logs() as logs:
            unreadable = await fake.push(bad)
            await fake.wait_for_ack(unreadable, timeout=5)
        first = await fake.push(good)
        await fake.wait_for_ack(first)
        assert [m.external_id for m in delivered] == ["Ev111"]
        assert any(e["event"] == "slack.ignored" and "unreadable" in e["reason"] and e["event_id"] == "EvBad"
                   for e in logs)
    finally:
        await adapter.stop()


async def test_slack_bot_token_refused_at_start_is_one_readable_line(fake: FakeSlack):
    adapter = make_adapter(fake, bot_token="xoxb-wrong")
    with pytest.raises(ChannelSendError) as raised:  # a failed start: `channel.start_failed` says it
        await asyncio.wait_for(adapter.start(_collector([])), timeout=30)
    # It was the SDK's two lines: "The request to the Slack API failed. (url: …)\nThe server responded with: {…}".
    assert "\n" not in str(raised.value) and "Slack refused the bot_token (xoxb-…)" in str(raised.value)
    assert "invalid_auth" in str(raised.value) and raised.value.permanent
