"""auth.test at start when Slack cannot be reached: one line an operator reads, naming where and why."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from channels.slack import SlackAdapter
from gateway.errors import ChannelSendError
from gateway.models import ConversationRef, OutboundMessage
from gateway.settings import SlackChannel
from tests.channels.slack_helpers import SECRET, Sleeps, fake_fixture  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID


async def test_slack_unreachable_at_start_names_the_api_base_and_why():
    # It was the aiohttp exception as it is: "ClientConnectorError: Cannot connect to host 127.0.0.1:1
    # ssl:default [Connect call failed ('127.0.0.1', 1)]", which named neither Slack nor the api_base key.
    api_base = "http://127.0.0.1:1/api/"
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=api_base))
    with capture_logs() as logs:
        await asyncio.wait_for(adapter.start(lambda message: None), timeout=30)
    await adapter.stop()
    [failed] = [e for e in logs if e["event"] == "slack.auth_test_failed"]
    assert failed["error"] == f"cannot reach Slack at {api_base} (api_base) for auth.test: connection refused"


async def test_slack_unreachable_at_start_is_said_in_readyz_until_slack_answers(fake):
    """Only a refused token was recorded: a wrong api_base or a network down at start showed nothing under
    /readyz's `connections`, so the channel looked healthy until the first send failed."""
    api_base = "http://127.0.0.1:1/api/"
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=api_base))
    await asyncio.wait_for(adapter.start(lambda message: None), timeout=30)
    assert adapter.connection_status == f"cannot reach Slack at {api_base} (api_base) for auth.test: connection refused"
    adapter.client.base_url = fake.api_base  # the network is back: the first call Slack answers clears it
    await adapter.send(OutboundMessage(ConversationRef("slack", "T111", "C111"), "hello"))
    assert adapter.connection_status is None
    await adapter.stop()


class _Gate:
    """The adapter's sleep: records each wait, and lets the retry go on only once the test opens the gate."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.opened = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self.opened.wait()


async def _until(check, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize(("status", "error"), [(500, "internal_error"), (503, "service_unavailable"),
                                               (200, "fatal_error")])
async def test_slack_auth_test_failing_at_start_is_asked_again_with_backoff_until_slack_answers(fake, status, error):
    """auth.test was asked once: a Slack 5xx at boot left the bot's user id and workspace unknown until a restart
    (its own posts not told apart from another app's, events of other workspaces not filtered out)."""
    fake.fail("auth.test", status=status, error=error, times=2)
    sleeps = Sleeps()
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=fake.api_base),
                           sleep=sleeps)
    try:
        with capture_logs() as logs:
            await adapter.start(lambda message: None)  # the channel starts meanwhile, as Telegram's and Discord's do
            await _until(lambda: adapter.bot_user_id is not None)
        assert (adapter.bot_user_id, adapter.team_id) == (BOT_USER_ID, "T111")
        assert fake.count("auth.test") == 3
        assert sleeps == [5.0, 10.0]  # doubling from 5 s, up to 5 min between tries
        failed = [e for e in logs if e["event"] == "slack.auth_test_failed"]
        assert [e["failures"] for e in failed] == [1, 2] and all(e["log_level"] == "warning" for e in failed)
        assert failed[0]["error"] == f"auth.test failed: {error} (HTTP {status})"
        [learned] = [e for e in logs if e["event"] == "slack.identity_learned"]
        assert learned["failures"] == 2 and learned["bot_user_id"] == BOT_USER_ID
    finally:
        await adapter.stop()


async def test_slack_unreachable_at_start_is_asked_again_once_the_network_is_back(fake):
    api_base = "http://127.0.0.1:1/api/"
    gate = _Gate()
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=api_base),
                           sleep=gate)
    try:
        await asyncio.wait_for(adapter.start(lambda message: None), timeout=30)
        assert adapter.bot_user_id is None and adapter.connection_status.startswith("cannot reach Slack")
        await _until(lambda: gate.waits)
        adapter.client.base_url = fake.api_base  # the network is back
        gate.opened.set()
        await _until(lambda: adapter.bot_user_id is not None)
        assert adapter.bot_user_id == BOT_USER_ID and adapter.connection_status is None
    finally:
        await adapter.stop()


async def test_slack_bot_token_refused_at_start_fails_the_channel_at_once(fake):
    """A refused bot token was a warning and a started channel (listed under `channels=`) that could post no
    reply, where Telegram's and Discord's rejected tokens, and Slack's own app token, fail the start."""
    sleeps = Sleeps()
    adapter = SlackAdapter("demo", SlackChannel(bot_token="xoxb-wrong", signing_secret=SECRET, api_base=fake.api_base),
                           sleep=sleeps)
    with pytest.raises(ChannelSendError) as raised:
        await adapter.start(lambda message: None)
    assert raised.value.permanent
    assert str(raised.value) == "Slack refused the bot_token (xoxb-…): invalid_auth from auth.test"
    await asyncio.sleep(0.05)
    assert fake.count("auth.test") == 1 and sleeps == []  # not asked again: no retry fixes it
    await adapter.stop()


async def test_a_start_that_fails_after_auth_test_failed_asks_auth_test_no_more(fake):
    """auth.test failing (a 5xx) left its background retry running when the start then failed (a refused app token):
    a channel `channel.start_failed` reported as not started went on asking auth.test, and logging
    slack.auth_test_failed, for the process's life."""
    fake.fail("auth.test", status=500, error="internal_error", times=1000)
    sleeps = Sleeps()  # no wait: a retry left running would ask again at once
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=fake.api_base,
                                                app_token="xapp-wrong"), sleep=sleeps)
    try:
        with capture_logs() as logs:
            with pytest.raises(ChannelSendError, match="app_token"):
                await asyncio.wait_for(adapter.start(lambda message: None), timeout=30)
            asked, said = fake.count("auth.test"), len(logs)  # a retry or two while the start went on
            await asyncio.sleep(0.3)
        assert fake.count("auth.test") == asked and len(logs) == said
    finally:
        await adapter.stop()
