"""Slack with `respond_in_groups: always` through the real app: every channel message is a question."""

from __future__ import annotations

import time

import pytest
import pytest_asyncio

from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.gateway_channels.conftest import QUESTION, gateway_app, settle, settled_chat, wait_until
from tests.gateway_channels.test_slack_e2e import SIGNING_SECRET, envelope, post, posted_to, revision

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    fake = await FakeSlack.start()
    channels = {"slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}",
                          "api_base": fake.api_base, "respond_in_groups": "always"}}
    try:
        async with gateway_app(tmp_path_factory.mktemp("slack_always"), channels=channels,
                               env={"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET}) as app:
            yield (*app, fake)
    finally:
        await fake.stop()


def channel_revision(event_id: str, channel: str, ts: str, text: str) -> dict:
    body = revision(event_id, channel, ts, text)
    body["event"]["channel_type"] = "channel"
    return body


async def test_slack_channel_question_retried_after_its_edit_is_answered_once_on_the_edit(env):
    """A channel message's first delivery failed and the member edited it meanwhile: the edit was dropped as one of a
    message already answered, and Slack's retry of the original was answered on the text the member had replaced."""
    client, services, fake = env
    ts = f"{int(time.time()) - 120}.000100"
    for retry in (None, 1):  # the edit, and Slack's retry of it
        assert (await post(client, channel_revision("Ev0602", "C0601", ts, QUESTION), retry=retry)).status_code == 200
    original = envelope("Ev0601", "C0601", "How much?", ts=ts, channel_type="channel")
    assert (await post(client, original, retry=1)).status_code == 200
    [reply] = await wait_until(lambda: posted_to(fake, "C0601"), what="the answer")
    assert "$" in reply["text"] and reply["thread_ts"] == ts  # under the question, as its own delivery is answered
    await settle()
    stored = await settled_chat(services, channel="slack", chat="C0601", count=2)
    assert [(m.direction, m.text) for m in stored][:1] == [("in", QUESTION)] and len(stored) == 2
    assert len(posted_to(fake, "C0601")) == 1


async def test_slack_channel_edit_of_a_question_whose_answer_failed_is_not_answered(env):
    """As in a DM: the question was stored and its answer failed for good; the member's edit is no second question."""
    client, services, fake = env
    ts = f"{int(time.time()) - 60}.000100"
    fake.fail("chat.postMessage", error="msg_too_long")
    await post(client, envelope("Ev0611", "C0611", QUESTION, ts=ts, channel_type="channel"))
    stored = await settled_chat(services, channel="slack", chat="C0611", count=2)  # the question, its failed answer
    assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "failed")]
    assert (await post(client, channel_revision("Ev0612", "C0611", ts, "And the price?"))).status_code == 200
    await settle(services=services)
    assert posted_to(fake, "C0611") == [] and len(await settled_chat(services, channel="slack", chat="C0611")) == 2
