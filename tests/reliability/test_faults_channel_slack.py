"""Slack: a chat.postMessage that Slack accepted but whose answer never came back is not posted again:
the retry reads the thread's message metadata, finds the part, and records the reply as sent.

The real slack_sdk client against the fake Web API, through the real app; see test_faults_channel
for the same guarantee on Telegram.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Message
from tests.fakes.slack_api import FakeSlack
from tests.gateway_channels.conftest import settle, wait_until
from tests.reliability.conftest import running_app, slack_event, slack_request

pytestmark = pytest.mark.asyncio(loop_scope="module")


class StallingSlack(FakeSlack):
    """The fake Web API, able to accept a chat.postMessage and then not answer in time."""

    stall_next_posts = 0

    async def _api(self, request):
        response = await super()._api(request)
        if request.match_info["method"] == "chat.postMessage" and self.stall_next_posts:
            self.stall_next_posts -= 1
            await asyncio.sleep(4)
        return response


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    slack = await StallingSlack.start()
    try:
        bots = [{"name": "acme", "channels": {"web": {}, "slack": {
            "bot_token": "${REL_SLACK_BOT_TOKEN}", "signing_secret": "${REL_SLACK_SIGNING}",
            "api_base": slack.api_base}}}]
        async with running_app(tmp_path_factory.mktemp("faults-slack"), bots=bots) as (client, services):
            services.adapters[("acme", "slack")].client.timeout = 1  # gives up long before the stalled answer
            services.outbox.max_backoff_s = services.outbox.max_platform_wait_s = 0.3
            yield client, services, slack
    finally:
        await slack.stop()


async def test_slack_timeout_after_slack_accepted_is_reconciled_not_posted_twice(env):
    client, services, slack = env
    slack.stall_next_posts = 1
    response = await client.post("/webhooks/acme/slack/events", **slack_request(slack_event("EvSTALL001", "Hello?")))
    assert response.status_code == 200

    async def settled():
        async with services.sessions() as session:
            rows = (await session.execute(select(Message).where(Message.direction == "out"))).scalars().all()
        return rows if rows and all(r.status in ("sent", "failed") for r in rows) else None

    [reply] = await wait_until(settled, timeout=60, what="the reply to settle")
    await settle(5.0)  # past the stall and several retry windows
    posts = [c for c in slack.calls_to("chat.postMessage")]
    assert len(posts) == 1, json.dumps([c.params for c in posts])[:500]  # posted once, never again
    lookups = slack.calls_to("conversations.replies") + slack.calls_to("conversations.history")
    assert len(lookups) == 1  # the retry asked Slack what landed instead of posting blindly
    async with services.sessions() as session:
        final = await session.get(Message, reply.id)
    assert final.status == "sent" and final.attempts == 2
    assert final.provider_ids == [posts[0].params["_ts"]]
