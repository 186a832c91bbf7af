"""A Slack operator channel no operator names a member for refuses every click and reply: `/readyz` and
`gateway chat` say so, where only `serve`'s start log did (`slack_operator.no_operators`)."""

from __future__ import annotations

import os
import subprocess
import sys

from gateway.operators.slack_access import NO_OPERATORS
from tests.conftest import ROOT, app_client, write_config

SLACK = {"bot_token": "${READYZ_SLACK_BOT}", "signing_secret": "${READYZ_SLACK_SECRET}", "operator_channel": "COPS"}
ENV = {"READYZ_SLACK_BOT": "xoxb-1", "READYZ_SLACK_SECRET": "a-signing-secret", "READYZ_SAM": "sam-token-0123456789",
       "READYZ_KIM": "kim-token-9876543210"}
BOTS = [{"name": "acme", "channels": {"web": {}, "slack": SLACK}},
        {"name": "beta", "channels": {"web": {}, "slack": SLACK}},
        {"name": "plain", "channels": {"web": {}}}]
OPERATORS = [{"name": "sam", "token": "${READYZ_SAM}", "bots": ["beta"], "slack_user_ids": ["UOPS"]},
             {"name": "kim", "token": "${READYZ_KIM}", "bots": ["acme"]}]  # serves acme, names no member


async def test_readyz_names_an_operator_channel_that_refuses_everyone_and_stays_ready(tmp_path):
    async with app_client(tmp_path, bots=BOTS, operators=OPERATORS, env=ENV, start_worker=False) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200 and response.json()["status"] == "ready"  # reported, not readiness
    channels = response.json()["operator_channels"]
    assert set(channels) == {"acme", "beta"} and channels["beta"] == "ok"
    assert channels["acme"].startswith("refuses everyone: ") and NO_OPERATORS in channels["acme"]
    assert "slack_user_ids" in channels["acme"]


def test_cli_chat_names_an_operator_channel_that_refuses_everyone(tmp_path):
    config = write_config(tmp_path, bots=BOTS, operators=OPERATORS)
    env = {**os.environ, **ENV, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    upgraded = subprocess.run([sys.executable, "-m", "gateway", "db", "upgrade", "--config", str(config)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    proc = subprocess.run([sys.executable, "-m", "gateway", "chat", "--config", str(config), "--bot", "plain"],
                          cwd=ROOT, input="\n", capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "operator channel" in line]
    assert notes == [f"note: bot 'acme', Slack operator channel COPS: {NO_OPERATORS}; add `slack_user_ids: "
                     "[U0123ABCD]` (each person's Slack member id) to the operators who serve this bot"], proc.stderr
