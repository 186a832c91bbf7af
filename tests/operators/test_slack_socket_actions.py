"""The Slack operator channel's Claim and Resolve buttons in Socket Mode: the real slack-sdk client of the
app's Slack adapter against the fake Socket Mode server, the click as Slack sends it (an `interactive`
envelope). Why: only `events_api` envelopes were handled, so with `app_token` set the buttons did
nothing (`slack.ignored … socket mode 'interactive' is not handled`) and the click was lost."""

from __future__ import annotations

import pytest
import pytest_asyncio

from gateway.models import ConversationRef
from storage import repositories as repo
from tests.conftest import app_client
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN
from tests.gateway_channels.conftest import wait_until
from tests.operators.conftest import OPS_CHANNEL, SIGNING_SECRET, TOKENS
from tests.operators.test_slack_operator_access import held_claims

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tmp_path_factory, slack):
    """The real app, its Slack channel in Socket Mode (started here: `app_client` starts no channel)."""
    bots = [{"name": "acme", "channels": {"slack": {
        "bot_token": "${SOCK_SLACK_BOT}", "signing_secret": "${SOCK_SLACK_SECRET}", "app_token": "${SOCK_SLACK_APP}",
        "api_base": slack.api_base, "operator_channel": OPS_CHANNEL}}}]
    env = {"SOCK_SLACK_BOT": BOT_TOKEN, "SOCK_SLACK_SECRET": SIGNING_SECRET, "SOCK_SLACK_APP": APP_TOKEN,
           "SOCK_SAM_TOKEN": TOKENS["sam"]}
    operators = [{"name": "sam", "token": "${SOCK_SAM_TOKEN}", "bots": ["acme"], "slack_user_ids": ["UOPS"]}]
    async with app_client(tmp_path_factory.mktemp("socket-actions"), bots=bots, operators=operators, env=env,
                          start_worker=False) as http:
        await http.services.reminders.stop()
        adapter = http.services.adapters[("acme", "slack")]
        await adapter.start(http.services._deliver_for("acme"))
        await wait_until(lambda: slack.sockets, timeout=5, what="the socket")
        try:
            yield http
        finally:
            await adapter.stop()


async def _escalation(app, chat: str) -> int:
    async with app.services.sessions() as session, session.begin():
        ref = ConversationRef(channel="slack", workspace="T111", chat=chat)
        conversation = await repo.get_or_create_conversation(session, bot="acme", ref=ref, contact_id=None)
        return (await app.services.escalations.open_in(session, conversation=conversation, reason="asked")).id


def _click(action: str, escalation_id: int, user: str = "UOPS") -> dict:
    return {"type": "block_actions", "user": {"id": user, "username": "dana"},
            "actions": [{"action_id": action, "value": str(escalation_id)}]}


async def test_claim_and_resolve_clicks_over_the_socket_act_and_are_acked(app, slack):
    escalation_id = await _escalation(app, "DSOCK1")
    claimed = await slack.push(_click("escalation_claim", escalation_id), kind="interactive")
    await slack.wait_for_ack(claimed)
    await app.services.slack_clicks.drain()  # acked first, claimed after
    escalation = await app.services.escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "sam"

    resolved = await slack.push(_click("escalation_resolve", escalation_id), kind="interactive")
    await slack.wait_for_ack(resolved)
    await app.services.slack_clicks.drain()
    assert (await app.services.escalations.get(escalation_id, bots=None)).state == "resolved"


async def test_a_malformed_click_over_the_socket_changes_nothing_and_is_acked(app, slack):
    """Acked all the same: Slack sending it again would not make it well formed."""
    escalation_id = await _escalation(app, "DSOCK2")
    bad = await slack.push({"type": "block_actions", "user": {"id": "UOPS"},
                            "actions": [{"action_id": "escalation_claim", "value": "not-an-id"}]}, kind="interactive")
    await slack.wait_for_ack(bad)
    await app.services.slack_clicks.drain()
    assert (await app.services.escalations.get(escalation_id, bots=None)).state == "open"


async def test_a_click_over_the_socket_by_a_member_who_is_no_operator_changes_nothing(app, slack):
    """Socket Mode clicks are authorized as the Interactivity URL's are: the socket proves the app, not the member."""
    escalation_id = await _escalation(app, "DSOCK3")
    refused = await slack.push(_click("escalation_claim", escalation_id, user="UGUEST"), kind="interactive")
    await slack.wait_for_ack(refused)
    await app.services.slack_clicks.drain()
    assert (await app.services.escalations.get(escalation_id, bots=None)).state == "open"
    told = await wait_until(lambda: [c for c in slack.calls_to("chat.postEphemeral") if c.params.get("user") == "UGUEST"])
    assert "not an operator for this bot" in told[0].params["text"]


async def test_a_click_over_the_socket_is_acked_before_its_slow_work_and_still_claims(app, slack, monkeypatch):
    """Acked only once the claim was done, a slow one passed Slack's 3 s and the member saw an error."""
    escalation_id = await _escalation(app, "DSOCK4")
    release = held_claims(app.services.escalations, monkeypatch)
    claimed = await slack.push(_click("escalation_claim", escalation_id), kind="interactive")
    # The claim is held until released below: an ack that waited for it would never come, so the wait can be
    # long enough for a loaded machine (2 s was not always).
    await slack.wait_for_ack(claimed, timeout=30)
    assert (await app.services.escalations.get(escalation_id, bots=None)).state == "open"
    release.set()
    await app.services.slack_clicks.drain()
    escalation = await app.services.escalations.get(escalation_id, bots=None)
    assert escalation.state == "claimed" and escalation.operator == "sam"
