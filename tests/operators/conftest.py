"""Fixtures for the operator tests: one app per module with operators, the web channel and fake Slack; and
for the console browser tests (test_console_browser*.py), the app on a real port and tabs of a real Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import app_client
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack

# The browser fixtures, for the console tests (a conftest outside this folder's path is not read).
from tests.web.conftest import HELP_CENTER, _prepare, browser, chromium_path, serving, write_config  # noqa: F401

SIGNING_SECRET = "ops-signing-secret-1234"
TOKENS = {"sam": "sam-token-0123456789", "kim": "kim-token-9876543210", "lee": "lee-token-5555566666"}
OPS_CHANNEL = "COPS"
# The Slack members who may act in the operator channel (`slack_user_ids`); any other member is refused.
SLACK_MEMBERS = {"sam": "UOPS", "kim": "UIMP", "lee": "ULEE"}
CONSOLE_TOKEN = "console-operator-token-42"  # operator sam's, in the console browser tests
REX_TOKEN = "console-operator-rex-token-42"  # operator rex's, where the console tests take `rex_url`
WAIT_MS = 60_000


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


@contextlib.contextmanager
def console_server(root: Path, *, more_operators: str = ""):
    """The console tests' app on a real port: the help center's account page for bot acme, operator sam
    (CONSOLE_TOKEN), and the operators of `more_operators` (YAML list items under `operators:`)."""
    from gateway.app import create_app
    from gateway.settings import load_settings

    docs = root / "docs"
    docs.mkdir()
    shutil.copy(HELP_CENTER / "account.md", docs / "account.md")
    os.environ["CONSOLE_OPERATOR_TOKEN"] = CONSOLE_TOKEN
    config = write_config(root, docs=docs, operator_token_env="CONSOLE_OPERATOR_TOKEN")
    if more_operators:
        config.write_text(config.read_text().replace("bots:\n  - name: acme", more_operators + "bots:\n  - name: acme", 1))
    _prepare(config)
    with serving(create_app(load_settings(config), start_scheduler=False)) as url:
        yield url


@pytest.fixture(scope="module")
def rex_url(tmp_path_factory):
    """The URL of a module's `console_server` with a second operator, rex (REX_TOKEN), for the same bot: two
    operators at once."""
    os.environ["CONSOLE_REX_TOKEN"] = REX_TOKEN
    rex = '  - name: rex\n    token: "${CONSOLE_REX_TOKEN}"\n    bots: [acme]\n'
    with console_server(tmp_path_factory.mktemp("console-rex"), more_operators=rex) as url:
        yield url


@pytest.fixture(scope="module")
def console_root(tmp_path_factory) -> Path:
    """The folder of the console tests' app: its SQLite database is `gateway.db` there."""
    return tmp_path_factory.mktemp("console")


@pytest.fixture(scope="module")
def live_url(console_root):
    with console_server(console_root) as url:
        yield url


@pytest.fixture()
def open_tab(browser):  # noqa: F811 (the fixture imported above)
    """Opens a tab in a browser context of its own (its own storage); every one is closed after the test,
    so no console's live stream outlives it."""
    contexts = []

    def open_one(**options):
        contexts.append(browser.new_context(**options))
        return contexts[-1].new_page()

    yield open_one
    for context in contexts:
        context.close()


def sign_in(operator, live_url: str) -> None:
    """Open the console, sign in, and wait until its live stream is connected."""
    operator.goto(live_url + "/operator")
    operator.fill("#op-token", CONSOLE_TOKEN)
    operator.press("#op-token", "Enter")
    operator.wait_for_selector("#op-live:not([hidden])", timeout=WAIT_MS)


def open_escalation(operator, live_url: str, escalation: int) -> None:
    """Sign in (`sign_in`), open `escalation` from the list, and wait for its transcript."""
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{escalation}']")
    operator.wait_for_selector("#op-transcript .op-msg")


def open_listed(operator, has_text: str) -> None:
    """Once an escalation shows live in the list, open the one whose item shows `has_text` (its own: the list puts
    the longest waiting first), and wait for the customer's messages in its transcript."""
    operator.wait_for_selector(".op-item", timeout=WAIT_MS)
    operator.locator(".op-item", has_text=has_text).click()
    operator.wait_for_selector("#op-transcript .op-msg--contact")


def as_rex(page, rex_url: str, path: str, **data) -> int:
    """The status of operator rex's POST to `path` (with `data`, as JSON) on the app at `rex_url`."""
    return page.request.post(f"{rex_url}{path}", data=data or None,
                             headers={"Authorization": f"Bearer {REX_TOKEN}"}).status


def held_claim(sam, escalation: int) -> dict[str, object]:
    """Sam presses Claim on the escalation shown; the request is held (`["claim"]`) until the test lets it go."""
    held: dict[str, object] = {}
    sam.route(re.compile(rf".*/v1/escalations/{escalation}/claim$"), lambda route: held.__setitem__("claim", route))
    sam.click("#op-claim")
    for _ in range(WAIT_MS // 50):
        if "claim" in held:
            break
        sam.wait_for_timeout(50)  # the route handler runs while Playwright waits
    assert "claim" in held
    return held


def escalate(live_url: str, session_id: str, text: str) -> int:
    """A web chat customer asks for a person; the id of the escalation that opens."""
    body = json.dumps({"session_id": session_id, "text": text}).encode()
    request = urllib.request.Request(live_url + "/v1/bots/acme/chat", data=body,
                                     headers={"Content-Type": "application/json"})
    conversation = json.loads(urllib.request.urlopen(request, timeout=60).read())["conversation_id"]
    listing = urllib.request.Request(live_url + "/v1/escalations?state=open",
                                     headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})
    escalations = json.loads(urllib.request.urlopen(listing, timeout=60).read())["escalations"]
    return next(e["id"] for e in escalations if e["conversation_id"] == conversation)
