"""Slack operators' names across bots: an operator who serves several bots with Slack lists escalations of
each, and the names of all of them are looked up side by side, not one bot after the other."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import pytest_asyncio

from tests.conftest import app_client
from tests.fakes.slack_api import BOT_TOKEN

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOKEN = "lee-token-0123456789"
SLOW_S = 1.0


@contextlib.asynccontextmanager
async def _most_at_once(slack):
    """`[n]`: the most users.info calls the fake Slack held at once while the block ran."""
    most = [0]

    async def watch() -> None:
        while True:
            most[0] = max(most[0], slack.delayed)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        yield most
    finally:
        watcher.cancel()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, slack):
    slack_channel = {"bot_token": "${NAMES_SLACK_BOT}", "signing_secret": "${NAMES_SLACK_SECRET}", "api_base": slack.api_base}
    bots = [{"name": name, "channels": {"web": {}, "slack": slack_channel}} for name in ("acme", "beta", "gamma")]
    env = {"NAMES_LEE_TOKEN": TOKEN, "NAMES_SLACK_BOT": BOT_TOKEN, "NAMES_SLACK_SECRET": "names-signing-secret-1234"}
    async with app_client(tmp_path_factory.mktemp("names"), bots=bots, env=env,
                          operators=[{"name": "lee", "token": "${NAMES_LEE_TOKEN}", "bots": ["*"]}]) as http:
        await http.services.reminders.stop()
        yield http


async def test_names_of_several_bots_operators_are_looked_up_side_by_side(client, slack):
    """Each bot's look-ups waited for the previous bot's: with Slack slow or down, a list over n bots took
    n times `LOOKUP_TIMEOUT_S` (2 s each) before the console showed anything."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    members = {"acme": "UANA", "beta": "UBEN", "gamma": "UCAL"}
    for bot, user in members.items():
        slack.users[user] = {"name": user.lower(), "profile": {"display_name": user.title()}}
        chat = await client.post(f"/v1/bots/{bot}/chat", json={"session_id": f"names-{bot}", "text": "Can I speak to a human?"})
        listed = (await client.get(f"/v1/escalations?state=open&bot={bot}", headers=headers)).json()["escalations"]
        escalation = next(e["id"] for e in listed if e["conversation_id"] == chat.json()["conversation_id"])
        await client.services.escalations.claim(escalation, operator=f"slack:{user}", bots=None)
    slack.delays["users.info"] = SLOW_S
    async with _most_at_once(slack) as most:
        listed = (await client.get("/v1/escalations?state=claimed", headers=headers)).json()
    assert listed["operator_names"] == {"slack:UANA": "Uana", "slack:UBEN": "Uben", "slack:UCAL": "Ucal"}
    # Asked at the same time, not how long the list took (a loaded machine took longer with no fault).
    assert most[0] == 3, f"{most[0]} look-ups at once: one bot's look-ups after another's"


async def test_many_operators_are_looked_up_a_few_at_a_time_and_a_slow_lookup_is_named_next_time(slack):
    """A list of 40 Slack operators sent 40 users.info calls at once (Slack's rate limit refused most, and
    each refusal was remembered for five minutes). A few go at a time now; the list still waits at most
    `LOOKUP_TIMEOUT_S`, and the look-ups it did not wait for go on, so the next list names them."""
    from types import SimpleNamespace

    from slack_sdk.web.async_client import AsyncWebClient

    from gateway.operators.slack_names import LOOKUP_TIMEOUT_S, LOOKUPS_AT_ONCE, SlackOperatorNames

    users = [f"UMANY{i:02d}" for i in range(40)]
    for user in users:
        slack.users[user] = {"name": user.lower(), "profile": {"display_name": user.title()}}
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_base, retry_handlers=[])
    names = SlackOperatorNames({("acme", "slack"): SimpleNamespace(client=client)})
    slack.delays["users.info"] = 0.4
    before = slack.count("users.info")
    async with _most_at_once(slack) as most:
        started = time.monotonic()
        first = await names.names(("acme", f"slack:{user}") for user in users)
        took = time.monotonic() - started
        # Until the rest end (a fixed wait was not always enough on a loaded machine): a list asks no member
        # again whose look-up is under way, and each waits up to LOOKUP_TIMEOUT_S for those.
        second = await names.names(("acme", f"slack:{user}") for user in users)
        async with asyncio.timeout(60):
            while len(second) < 40:
                second = await names.names(("acme", f"slack:{user}") for user in users)
    assert most[0] <= LOOKUPS_AT_ONCE
    # Did not wait for them all (40 / 8 × 0.4 s, and 16 s one at a time); the margin is for a loaded machine.
    assert took < LOOKUP_TIMEOUT_S + 3 and 0 < len(first) < 40
    assert second == {f"slack:{user}": user.title() for user in users}
    assert slack.count("users.info") - before == 40  # each member asked once
