"""auth.test at start when Slack cannot be reached: one line an operator reads, naming where and why."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from channels.slack import SlackAdapter
from gateway.models import ConversationRef, OutboundMessage
from gateway.settings import SlackChannel
from tests.channels.slack_helpers import SECRET, fake_fixture  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import BOT_TOKEN


async def test_slack_unreachable_at_start_names_the_api_base_and_why():
    # It was the aiohttp exception as it is: "ClientConnectorError: Cannot connect to host 127.0.0.1:1
    # ssl:default [Connect call failed ('127.0.0.1', 1)]", which named neither Slack nor the api_base key.
    api_base = "http://127.0.0.1:1/api/"
    adapter = SlackAdapter("demo", SlackChannel(bot_token=BOT_TOKEN, signing_secret=SECRET, api_base=api_base))
    with capture_logs() as logs:
        await asyncio.wait_for(adapter.start(lambda message: None), timeout=30)
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
