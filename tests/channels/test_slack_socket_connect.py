"""Socket Mode's websocket that cannot be opened (apps.connections.open answered, its wss:// URL did not): slack_sdk's
connect() tried again every 5 s for ever, logging each failure as an error with a 40-line traceback that named
neither the channel nor the bot, and the channel's start never returned (no other channel, nor the server, started)."""

from __future__ import annotations

import asyncio
import logging

from structlog.testing import capture_logs

from tests.channels.slack_helpers import fake_fixture, make_adapter  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import APP_TOKEN, FakeSlack
from tests.scale.replicas import free_port


class _ShortSleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)
        await asyncio.sleep(0.02)


async def test_slack_socket_mode_websocket_refused_is_one_line_and_start_goes_on(fake: FakeSlack, caplog):
    closed = free_port()
    fake.socket_url = f"ws://127.0.0.1:{closed}/link?ticket=t"
    sleeps = _ShortSleeps()
    adapter = make_adapter(fake, app_token=APP_TOKEN, sleeps=sleeps)
    try:
        with capture_logs() as logs, caplog.at_level(logging.INFO, logger="slack_sdk"):
            await asyncio.wait_for(adapter.start(lambda message: None), timeout=10)  # it never returned
            async with asyncio.timeout(10):
                while len([e for e in logs if e["event"] == "slack.socket_mode_failed"]) < 2:
                    await asyncio.sleep(0.01)
        failed = [e for e in logs if e["event"] == "slack.socket_mode_failed"]
        said = (f"slack socket mode: cannot open the websocket Slack handed out (127.0.0.1:{closed}): "
                "connection refused")
        assert failed[0] == {"event": "slack.socket_mode_failed", "log_level": "warning", "bot": "demo",
                             "error": said, "failures": 1}
        assert adapter.connection_status.startswith(f"connecting again after {said}")
        # slack_sdk's own error and its traceback are not there too.
        assert [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []
        # Asked for a new URL each time: Slack's expire, and the one handed out may be the broken part.
        assert fake.count("apps.connections.open") >= 2
        fake.socket_url = None
        async with asyncio.timeout(10):
            while adapter.connection_status != "connected":
                await asyncio.sleep(0.01)
    finally:
        await adapter.stop()
