"""Slack operators by name in the console (real headless Chromium): held as `slack:<user id>`, they were
shown as `slack:U0123`, which told the operator reading the console nothing about who had the customer."""

from __future__ import annotations

import json
import re

import pytest

from tests.operators.conftest import CONSOLE_TOKEN, escalate, sign_in

pytestmark = pytest.mark.browser


def test_console_names_a_slack_operator_as_the_api_names_them(open_tab, live_url):
    escalation = escalate(live_url, "console-names", "Names here, I want to talk to a human")
    operator = open_tab()
    assert operator.request.post(f"{live_url}/v1/escalations/{escalation}/claim",
                                 headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"}).status == 200

    def held_in_slack(route):
        # The console's side only: as the API answers an escalation a Slack member claimed (see
        # tests/operators/test_slack_operator_names.py for the API's side).
        body = route.fetch().json()
        body["operator"] = "slack:UANA"
        body["events"] = [{**e, "actor": "slack:UANA"} for e in body["events"]]
        body["operator_names"] = {"slack:UANA": "Ana García"}
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    operator.route(re.compile(rf".*/v1/escalations/{escalation}$"), held_in_slack)
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{escalation}']")
    operator.wait_for_selector("#op-events li")
    assert "held by Ana García" in operator.locator("#op-meta").inner_text()
    assert operator.locator("#op-reply").get_attribute("placeholder").startswith("Ana García holds this escalation")
    assert "Ana García · claimed" in operator.locator("#op-events").inner_text()
    assert "slack:UANA" not in operator.locator("#op-detail").inner_text()
