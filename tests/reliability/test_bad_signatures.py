"""Unsigned requests whose signature headers are malformed: each is a 401 that says so, never a 500.

The signature headers are read before anything is verified, so whatever they hold comes from anyone who
can reach the webhook URL, not from the platform."""

from __future__ import annotations

import pytest

from tests.fakes.slack_api import sign
from tests.reliability.conftest import DISCORD_KEY, SLACK_SIGNING_SECRET, discord_ask, running_app, slack_event

# Digits past what a float holds (a timestamp of 400 digits), either sign; and digits past what int() reads.
TIMESTAMPS = ["9" * 400, "-" + "9" * 400, "9" * 5000, "1e400", "nan", "", " "]


@pytest.mark.asyncio
@pytest.mark.parametrize("timestamp", TIMESTAMPS, ids=["400-digits", "minus-400-digits", "5000-digits", "1e400",
                                                       "nan", "empty", "space"])
async def test_a_slack_request_timestamp_of_any_shape_is_401_not_a_500(tmp_path, timestamp):
    # `abs(now - int(timestamp))` with an int too large for a float raised OverflowError: a 500 to anyone.
    bots = [{"name": "acme", "channels": {"slack": {"bot_token": "${REL_SLACK_BOT_TOKEN}",
                                                    "signing_secret": "${REL_SLACK_SIGNING}"}}}]
    body = slack_event("EvTS000001", "hi")
    headers = {"content-type": "application/json", **sign(body, secret=SLACK_SIGNING_SECRET),
               "x-slack-request-timestamp": timestamp}
    async with running_app(tmp_path, bots=bots, start_worker=False) as (client, services):
        response = await client.post("/webhooks/acme/slack/events", content=body, headers=headers)
        assert response.status_code == 401 and response.json() == {"error": "invalid signature"}
        assert (await client.get("/healthz")).status_code == 200


@pytest.mark.asyncio
async def test_a_discord_timestamp_past_what_a_float_holds_is_401_not_a_500(tmp_path):
    # Checked after the signature, so only a holder of the key could send it; the same OverflowError was a 500.
    bots = [{"name": "acme", "channels": {"discord": {"token": "${REL_DISCORD_TOKEN}",
                                                      "public_key": DISCORD_KEY.verify_key.encode().hex()}}}]
    body, timestamp = discord_ask("1400000000000000001", "hi"), "9" * 400
    headers = {"content-type": "application/json", "X-Signature-Timestamp": timestamp,
               "X-Signature-Ed25519": DISCORD_KEY.sign(timestamp.encode() + body).signature.hex()}
    async with running_app(tmp_path, bots=bots, start_worker=False) as (client, services):
        response = await client.post("/webhooks/acme/discord/interactions", content=body, headers=headers)
        assert response.status_code == 401 and response.json() == {"error": "invalid signature"}
