"""Fixtures for the operator tests: one app per module with operators, the web channel and fake Slack."""

from __future__ import annotations

import pytest_asyncio

from tests.conftest import app_client
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack

SIGNING_SECRET = "ops-signing-secret-1234"
TOKENS = {"sam": "sam-token-0123456789", "kim": "kim-token-9876543210", "lee": "lee-token-5555566666"}
OPS_CHANNEL = "COPS"
# The Slack members who may act in the operator channel (`slack_user_ids`); any other member is refused.
SLACK_MEMBERS = {"sam": "UOPS", "kim": "UIMP", "lee": "ULEE"}


def auth(name: str) -> dict[str, str]:
    """The Authorization header of an operator."""
    return {"Authorization": f"Bearer {TOKENS[name]}"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack():
    fake = await FakeSlack.start()
    yield fake
    await fake.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, slack):
    tmp_path = tmp_path_factory.mktemp("operators")
    escalation = {"max_unanswered_turns": 2}
    bots = [
        {"name": "acme", "fallback_text": "I couldn't find that.", "escalation": escalation,
         "channels": {"web": {}, "slack": {"bot_token": "${OPS_SLACK_BOT}", "signing_secret": "${OPS_SLACK_SECRET}",
                                            "api_base": slack.api_base, "operator_channel": OPS_CHANNEL}}},
        {"name": "other", "channels": {"web": {}}},
    ]
    operators = [{"name": "sam", "token": "${OPS_SAM_TOKEN}", "bots": ["acme"], "slack_user_ids": [SLACK_MEMBERS["sam"]]},
                 {"name": "kim", "token": "${OPS_KIM_TOKEN}", "bots": ["acme", "other"],
                  "slack_user_ids": [SLACK_MEMBERS["kim"]]},
                 {"name": "lee", "token": "${OPS_LEE_TOKEN}", "bots": ["other"], "slack_user_ids": [SLACK_MEMBERS["lee"]]}]
    env = {"OPS_SAM_TOKEN": TOKENS["sam"], "OPS_KIM_TOKEN": TOKENS["kim"], "OPS_LEE_TOKEN": TOKENS["lee"],
           "OPS_SLACK_BOT": BOT_TOKEN,
           "OPS_SLACK_SECRET": SIGNING_SECRET}
    async with app_client(tmp_path, bots=bots, operators=operators, env=env) as http:
        # The tests run reminders and repairs themselves (`run_once(now=...)`, their own clock); the app's
        # 30-second loop on the real clock would race them (it once adopted a lost Slack header between
        # a test's two steps).
        await http.services.reminders.stop()
        yield http
