"""Signing out of the console with claims still held: the operator is asked to release them. Why: they stayed
claimed by someone who had gone home, and the stale-claim ping comes only once a customer has waited a whole
claim timeout (never after the holder's "one moment, let me check"), so the customer waited in silence."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import CONSOLE_TOKEN, escalate, sign_in

pytestmark = pytest.mark.browser


def _escalation(live_url: str, escalation: int) -> dict:
    request = urllib.request.Request(f"{live_url}/v1/escalations/{escalation}",
                                     headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})
    return json.loads(urllib.request.urlopen(request, timeout=60).read())


def test_signing_out_asks_to_release_the_claims_held_and_cancel_stays_signed_in(open_tab, live_url):
    escalation = escalate(live_url, "console-signout", "Sign out here, I want to talk to a human")
    operator = open_tab()
    sign_in(operator, live_url)
    token = {"Authorization": f"Bearer {CONSOLE_TOKEN}"}
    assert operator.request.post(f"{live_url}/v1/escalations/{escalation}/reply", headers=token,
                                 data={"text": "One moment, let me check."}).status == 201  # claims it

    with operator.expect_event("dialog") as shown:
        operator.click("#op-signout")
    asked = shown.value.message
    shown.value.dismiss()
    assert f"#{escalation}" in asked and "Release it" in asked
    expect(operator.locator("#op-main")).to_be_visible()  # Cancel: still signed in, the claim held
    assert _escalation(live_url, escalation)["state"] == "claimed"

    operator.once("dialog", lambda dialog: dialog.accept())
    operator.click("#op-signout")
    expect(operator.locator("#op-login")).to_be_visible()
    released = _escalation(live_url, escalation)
    assert released["state"] == "open" and released["operator"] is None
    assert [(e["kind"], e["reason"]) for e in released["events"]][-1] == ("released", "signed out")
