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


async def test_slack_socket_mode_websocket_that_never_answers_does_not_hold_up_the_start(fake: FakeSlack, monkeypatch):
    """A websocket host that takes the connection and never answers (a firewall that lets HTTPS to slack.com through
    but holds wss-primary.slack.com) held the channel's start, and every channel and the server after it, for
    aiohttp's 5 minutes; the open is now bounded, said as a timeout, and tried again with backoff."""
    import channels.slack_socket

    monkeypatch.setattr(channels.slack_socket, "WSS_CONNECT_TIMEOUT_S", 0.5, raising=False)
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # reads nothing back: the upgrade request waits for ever

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    fake.socket_url = f"ws://127.0.0.1:{port}/link?ticket=t"
    adapter = make_adapter(fake, app_token=APP_TOKEN, sleeps=_ShortSleeps())
    try:
        with capture_logs() as logs:
            await asyncio.wait_for(adapter.start(lambda message: None), timeout=10)
        [failed] = [e for e in logs if e["event"] == "slack.socket_mode_failed"]
        assert failed["error"] == (f"slack socket mode: cannot open the websocket Slack handed out (127.0.0.1:{port}): "
                                   "timeout")
        fake.socket_url = None  # Slack hands out a working one: the retry opens it
        async with asyncio.timeout(10):
            while adapter.connection_status != "connected":
                await asyncio.sleep(0.01)
    finally:
        await adapter.stop()
        for writer in held:
            writer.close()
        silent.close()


async def test_stop_while_socket_mode_is_being_opened_again_leaves_no_client_behind(fake: FakeSlack):
    """A stop that came while the background retry was opening Socket Mode cancelled it past its `client.close()`:
    slack_sdk's client was left with its message task and HTTP session open, pending until the process ended."""
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    fake.fail("apps.connections.open", status=503, error="service_unavailable")  # the start's open: retried
    fake.socket_url = f"ws://127.0.0.1:{silent.sockets[0].getsockname()[1]}/link?ticket=t"
    adapter = make_adapter(fake, app_token=APP_TOKEN, sleeps=_ShortSleeps())

    def processors() -> list[asyncio.Task]:
        return [t for t in asyncio.all_tasks() if "process_messages" in repr(t.get_coro()) and not t.done()]

    try:
        await asyncio.wait_for(adapter.start(lambda message: None), timeout=10)
        async with asyncio.timeout(10):
            while not held:  # the retry is opening the websocket now
                await asyncio.sleep(0.01)
        assert processors()
    finally:
        await asyncio.wait_for(adapter.stop(), timeout=10)
        await asyncio.sleep(0.05)
        left = processors()
        for writer in held:
            writer.close()
        silent.close()
    assert left == []


async def test_a_reconnect_whose_websocket_cannot_be_opened_asks_slack_for_a_new_one(fake: FakeSlack):
    """After a session dropped, slack_sdk asked Slack for one URL and then tried that same URL every 5 s for ever: a
    ticket that expired (or a host that was down) while the network was out left the channel deaf for good, with
    /readyz saying `connected`. Each try after a failure now asks Slack for a new URL."""
    adapter = make_adapter(fake, app_token=APP_TOKEN, sleeps=_ShortSleeps())
    try:
        with capture_logs() as logs:
            await asyncio.wait_for(adapter.start(lambda message: None), timeout=10)
            async with asyncio.timeout(10):
                while not fake.sockets:
                    await asyncio.sleep(0.01)
            fake.socket_url = f"ws://127.0.0.1:{free_port()}/link?ticket=expired"  # the reconnect's URL fails
            await fake.sockets[0].close()
            async with asyncio.timeout(20):
                while not [e for e in logs if e["event"] == "slack.socket_mode_failed"]:
                    await asyncio.sleep(0.05)
            fake.socket_url = None  # Slack hands out a working URL again
            async with asyncio.timeout(20):  # slack_sdk tries again every 5 s (PING_INTERVAL_S)
                while not fake.sockets:
                    await asyncio.sleep(0.05)
        assert fake.count("apps.connections.open") >= 3
    finally:
        await adapter.stop()
