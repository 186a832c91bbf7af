"""Secrets and access: no configured secret in logs, error bodies or /metrics; operator and admin
endpoints need their token; webhooks need a valid signature; installs are hash-checked.

Placeholder secrets refused with `environment: production` are covered by
tests/test_settings.py::test_settings_production_refuses_placeholder_secret.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re

import pytest
import structlog

from tests.conftest import ROOT
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.fakes.twilio_api import Reply
from tests.gateway_channels.conftest import wait_until
from tests.reliability.conftest import (
    LLM_KEY,
    SLACK_SIGNING_SECRET,
    TG_SECRET,
    TG_TOKEN,
    WA_TOKEN,
    channel_fakes,
    discord_ask,
    running_app,
    slack_event,
    slack_request,
    telegram_request,
    telegram_update,
    whatsapp_form,
    whatsapp_request,
)

OPERATOR_TOKEN = "op-token-reliability-H7j8K9"
SECRETS = {"telegram token": TG_TOKEN, "telegram webhook secret": TG_SECRET, "slack signing secret":
           SLACK_SIGNING_SECRET, "twilio auth token": WA_TOKEN, "operator token": OPERATOR_TOKEN,
           "llm api key": LLM_KEY}


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """Which secrets (or a telling part of one: the part after ':' of a bot token, the last 12
    characters) occur in `text`."""
    found = []
    for name, value in secrets.items():
        parts = {value, value.split(":", 1)[-1], value[-12:]}
        if any(part in text for part in parts):
            found.append(name)
    return found


async def test_secrets_never_in_logs_errors_or_metrics(tmp_path, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    secrets = dict(SECRETS)
    bodies: list[str] = []
    llm = FakeOpenAI().start()
    try:
        async with channel_fakes() as fakes:
            channels = fakes.channels
            models = [{"model_name": "primary", "litellm_params": {
                "model": "openai/primary", "api_base": llm.base_url, "api_key": "${REL_LLM_KEY}"}}]
            bots = [{"name": "acme", "model": "primary", "channels": channels}]
            async with running_app(tmp_path, bots=bots, models=models, env={"REL_OP_TOKEN": OPERATOR_TOKEN},
                                   operators=[{"name": "olga", "token": "${REL_OP_TOKEN}", "bots": ["acme"]}],
                                   llm={"timeout": 5, "num_retries": 0}, log_level="DEBUG") as (client, services):
                # Bad signatures on every webhook.
                bad = [
                    await client.post("/webhooks/acme/telegram", **telegram_request(telegram_update(1, "hi"),
                                                                                    secret=TG_SECRET[:-1] + "x")),
                    await client.post("/webhooks/acme/slack/events", **slack_request(slack_event("EvS1", "hi"),
                                                                                     secret="wrong-signing-secret")),
                    await client.post("/webhooks/acme/whatsapp", **whatsapp_request(whatsapp_form("SMs1", "hi"),
                                                                                    token="wrong-token")),
                    await client.post("/webhooks/acme/discord/interactions", content=discord_ask("1", "hi"),
                                      headers={"X-Signature-Ed25519": "00" * 64, "X-Signature-Timestamp": "1"}),
                ]
                assert [r.status_code for r in bad] == [401, 401, 401, 401]
                bodies += [r.text for r in bad]
                # Errors: malformed bodies, an LLM failure, failing sends on two channels.
                bodies.append((await client.post("/webhooks/acme/telegram", **telegram_request(b"{oops"))).text)
                llm.script("primary", Turn(status=500), Turn(status=401))
                fakes.telegram.fail_next("sendMessage", status=500, times=10)
                fakes.twilio.script(*[Reply(status=500)] * 10)
                services.outbox.max_backoff_s = services.outbox.max_platform_wait_s = 0.1
                services.outbox.max_attempts = 2
                assert (await client.post("/webhooks/acme/telegram",
                                          **telegram_request(telegram_update(2, "Where is my order?")))).status_code == 200
                assert (await client.post("/webhooks/acme/whatsapp",
                                          **whatsapp_request(whatsapp_form("SMs2", "Where is my order?")))).status_code == 200

                async def failed_sends():
                    text = (await client.get("/metrics")).text
                    return all(f'gateway_send_failures_total{{bot="acme",channel="{c}"}}' in text
                               for c in ("telegram", "whatsapp"))

                await wait_until(failed_sends, timeout=60, what="both sends to fail")
                # Operator and admin endpoints need their token.
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": OPERATOR_TOKEN}):
                    response = await client.get("/v1/escalations", headers=headers)
                    assert response.status_code in (401, 403)
                    bodies.append(response.text)
                ok = await client.get("/v1/escalations", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
                assert ok.status_code == 200
                for path in ("/v1/escalations/1/claim", "/v1/escalations/1/reply", "/v1/escalations/1/resolve"):
                    refused = await client.post(path, json={"text": "hi"})
                    assert refused.status_code in (401, 403)
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    admin = await client.post("/v1/admin/ingest", headers=headers)
                    assert admin.status_code == 401
                secrets["admin token"] = services.admin_token  # generated per process; never logged either
                # A careless log line with a secret (a regression to guard against) is redacted.
                structlog.get_logger("tests.reliability").warning("probe.structlog", token=TG_TOKEN, key=LLM_KEY)
                logging.getLogger("tests.reliability").warning("probe.stdlib %s %s", WA_TOKEN, OPERATOR_TOKEN)
                bodies += [(await client.get("/metrics")).text, (await client.get("/readyz")).text,
                           json.dumps((await client.get("/v1/bots")).json())]
    finally:
        llm.stop()
    out, err = capfd.readouterr()
    logs = out + err + caplog.text
    assert "probe.structlog" in logs and "probe.stdlib" in logs
    assert "webhook.signature_invalid" in logs and "outbound.failed" in logs  # the capture did see the logs
    assert len(logs) > 1000
    assert _leaks(logs, secrets) == []
    assert _leaks("\n".join(bodies), secrets) == []


def test_installs_require_hashes():
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if re.search(r"pip install\b", line) and " -r " in line]
    assert installs and all("--require-hashes" in line for line in installs), installs
    for lock in ("requirements.lock", "requirements-dev.lock"):
        text = (ROOT / lock).read_text()
        pins = [line for line in text.splitlines() if re.match(r"^[A-Za-z0-9_.\-\[\],]+==", line)]
        assert pins and text.count("--hash=sha256:") >= len(pins), lock
    dockerfile = ROOT / "Dockerfile"
    if not dockerfile.exists():
        pytest.skip("no Dockerfile in the repository yet (DESIGN.md asks for one)")
    lines = [line for line in dockerfile.read_text().splitlines() if "pip install" in line and " -r " in line]
    assert lines and all("--require-hashes" in line for line in lines), lines


def test_webhook_signature_verifiers_are_real_libraries():
    # The adapters verify with the platforms' own algorithms; nothing is stubbed in the app.
    assert importlib.util.find_spec("nacl") and importlib.util.find_spec("twilio.request_validator")


def test_a_dotenv_file_of_secrets_is_never_committed():
    # docker-compose.yml reads its secrets from a .env beside it, and .gitignore did not list it:
    # `git add -A` in a deployment's checkout committed every token.
    import subprocess

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT, check=False)
    assert ignored.returncode == 0


async def test_an_ingest_that_breaks_sends_its_error_to_the_cli_redacted():
    """`gateway ingest` through a running server prints the server's `{"error": …}` line as it comes: an embedding
    provider's refusal quoting its key went whole to the CLI, which cannot redact a key only the server knows."""
    import asyncio

    from gateway.http.admin import _progress_lines
    from gateway.observability.logs import configure_logging

    key = "sk-server-only-0123456789"

    class Breaking:
        def start_ingest(self, **_):
            async def run():
                raise RuntimeError(f"Incorrect API key provided: {key}")
            return asyncio.ensure_future(run())

    configure_logging(level="WARNING", secrets=[key])
    try:
        lines = [json.loads(line) async for line in _progress_lines(Breaking(), bot=None, source=None)]
    finally:
        configure_logging(level="WARNING")
    assert lines == [{"error": "the ingest failed: RuntimeError: Incorrect API key provided: [REDACTED]"}]
