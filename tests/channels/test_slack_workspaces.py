"""Slack installations: one app installed in several workspaces sends all their events to one URL (the bot
token answers one), and an uninstalled app can post nothing."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from gateway.errors import ChannelSendError
from tests.channels.slack_helpers import Sleeps, fake_fixture, make_adapter  # noqa: F401 - `fake` fixture
from tests.fakes.slack_api import BOT_USER_ID, FakeSlack


def mention(team: str, *, event_id: str, user_id: str = BOT_USER_ID, enterprise: str | None = None,
            **envelope: object) -> dict:
    authorization = {"enterprise_id": enterprise, "team_id": team, "user_id": user_id, "is_bot": True,
                     "is_enterprise_install": False}
    return {"type": "event_callback", "team_id": team, "api_app_id": "A111", "event_id": event_id,
            "authorizations": [authorization], **envelope,
            "event": {"type": "app_mention", "channel": "C0HELP", "user": "U0ASKER", "ts": "1700000100.000100",
                      "text": f"<@{user_id}> how much is the Plus plan?", "team": team}}


async def _started(fake: FakeSlack):
    adapter = make_adapter(fake, sleeps=Sleeps())

    async def deliver(message) -> None:
        raise AssertionError("the Events API delivers through the webhook route")

    await adapter.start(deliver)
    return adapter


async def test_slack_event_from_another_workspace_of_the_app_is_ignored_not_answered_with_the_wrong_token(fake):
    adapter = await _started(fake)
    with capture_logs() as logs:
        foreign = [adapter.parse_payload(mention("T222", event_id=f"Ev{n}", user_id="U0OTHERBOT")) for n in range(2)]
    # Before: stored, answered by the model, then posted with T111's token into T222's channel:
    # `channel_not_found`, a failed reply, and an admin sent to invite the bot where it already is.
    assert all(not result.messages for result in foreign)
    assert "workspace T222" in foreign[0].ignored[0] and "T111" in foreign[0].ignored[0]
    warned = [entry for entry in logs if entry["event"] == "slack.foreign_workspace"]
    assert [(w["workspace"], w["token_workspace"]) for w in warned] == [("T222", "T111")]  # once, not per message
    (own,) = adapter.parse_payload(mention("T111", event_id="Ev3")).messages
    assert own.conversation.workspace == "T111" and own.text == "how much is the Plus plan?"


async def test_slack_shared_channel_or_org_wide_install_events_are_still_answered(fake):
    adapter = await _started(fake)
    # A channel shared with another organisation: Slack names only one of the installations that see it.
    shared = adapter.parse_payload(mention("T222", event_id="Ev4", user_id="U0OTHERBOT", is_ext_shared_channel=True))
    assert len(shared.messages) == 1
    fake.identity = {"team_id": "E0ORG", "enterprise_id": "E0ORG", "is_enterprise_install": True}
    org = await _started(fake)
    assert org.team_id == "E0ORG"
    # An org-wide token answers in every workspace of its organisation, not in another organisation's.
    assert len(org.parse_payload(mention("T333", event_id="Ev5", enterprise="E0ORG")).messages) == 1
    assert not org.parse_payload(mention("T444", event_id="Ev6", enterprise="E0OTHER")).messages


async def test_slack_team_unknown_when_auth_test_failed_filters_nothing(fake):
    fake.fail("auth.test", error="internal_error", status=500)
    adapter = await _started(fake)
    assert adapter.team_id is None
    assert len(adapter.parse_payload(mention("T222", event_id="Ev7")).messages) == 1


def _gone(kind: str, event_id: str, **event: object) -> dict:
    return {"type": "event_callback", "team_id": "T111", "api_app_id": "A111", "event_id": event_id,
            "authorizations": [{"team_id": "T111", "user_id": BOT_USER_ID, "is_bot": True}],
            "event": {"type": kind, **event}}


async def test_slack_app_uninstalled_or_bot_token_revoked_is_said_in_readyz_and_the_log(fake):
    adapter = await _started(fake)
    assert adapter.connection_status is None  # Events API: no connection to report while all is well
    # A user's own token revoked: the bot's still works.
    other = adapter.parse_payload(_gone("tokens_revoked", "Ev8", tokens={"oauth": ["U0SOMEONE"], "bot": []}))
    assert "tokens_revoked" in other.ignored[0] and adapter.connection_status is None
    with capture_logs() as logs:
        gone = adapter.parse_payload(_gone("app_uninstalled", "Ev9"))
    # Before: "event type 'app_uninstalled' is not handled" at info level, and then only a failed reply
    # per question (invalid_auth, account_inactive), each blamed on its recipient.
    assert adapter.connection_status == gone.ignored[0]
    assert "app_uninstalled in workspace T111" in adapter.connection_status and "bot_token" in adapter.connection_status
    assert [entry["log_level"] for entry in logs if entry["event"] == "slack.token_gone"] == ["warning"]
    revoked = await _started(fake)
    revoked.parse_payload(_gone("tokens_revoked", "Ev10", tokens={"bot": [BOT_USER_ID]}))
    assert revoked.connection_status.startswith("tokens_revoked in workspace T111")


async def test_slack_app_uninstalled_from_another_workspace_leaves_this_one_ready(fake):
    """The app installed in two workspaces, uninstalled from the other one: its app_uninstalled comes to the
    same URL, without an installation left to name in `authorizations`, and /readyz said this bot's token gone."""
    adapter = await _started(fake)
    other = {**_gone("app_uninstalled", "Ev11"), "team_id": "T222", "authorizations": []}
    assert adapter.parse_payload(other).ignored and adapter.connection_status is None
    revoked = {**_gone("tokens_revoked", "Ev12", tokens={"bot": ["U0OTHERBOT"]}), "team_id": "T222", "authorizations": []}
    adapter.bot_user_id = None  # not learned (auth.test failed at first): any bot token named counted
    adapter.parse_payload(revoked)
    assert adapter.connection_status is None
    assert adapter.parse_payload(_gone("app_uninstalled", "Ev13")).ignored
    assert adapter.connection_status.startswith("app_uninstalled in workspace T111")


async def test_slack_token_refused_at_start_is_said_in_readyz_from_the_start(fake):
    """auth.test answered `account_inactive` (a deleted workspace or app): /readyz said all was well until
    the first reply failed."""
    fake.fail("auth.test", error="account_inactive")
    with pytest.raises(ChannelSendError, match="account_inactive from auth.test") as raised:
        await _started(fake)  # at start: a failed start (`channel.start_failed`), which /readyz says
    assert raised.value.permanent
    # Refused when auth.test is asked again after Slack failed at start: the channel runs, and /readyz says so.
    fake.fail("auth.test", status=503, error="service_unavailable")
    fake.fail("auth.test", error="account_inactive")
    adapter = await _started(fake)
    try:
        async with asyncio.timeout(10):
            while adapter.connection_status is None:
                await asyncio.sleep(0.01)
        assert adapter.connection_status.startswith("account_inactive from auth.test: Slack refuses this bot's token")
        assert fake.count("auth.test") == 3 and adapter._identity_task.done()  # not asked again after
    finally:
        await adapter.stop()
