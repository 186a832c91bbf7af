"""Where the console shows what an operator's action said went wrong: on the escalation it was about, while
that escalation is as the refusal found it (real headless Chromium, the real app on a real port)."""

from __future__ import annotations

import re

import pytest

from tests.operators.conftest import as_rex, escalate, held_claim, open_escalation

pytestmark = pytest.mark.browser


def test_console_clears_a_lost_claims_error_once_the_escalation_is_open_again(open_tab, rex_url):
    """Sam's claim lost to Rex ("already claimed by rex"); Rex then released it: the escalation was open again,
    Claim offered, and the error still said Rex held it, kept on every refresh until Sam's next action."""
    escalation = escalate(rex_url, "console-error-reopen", "Reopen here, I want to talk to a human")
    sam = open_tab()
    open_escalation(sam, rex_url, escalation)
    held = held_claim(sam, escalation)
    assert as_rex(sam, rex_url, f"/v1/escalations/{escalation}/claim") == 200
    with sam.expect_response(re.compile(rf".*/v1/escalations/{escalation}/claim$")):
        held["claim"].continue_()
    sam.wait_for_function("() => document.getElementById('op-meta').textContent.includes('held by rex')")
    sam.wait_for_selector("#op-error:not([hidden])")
    assert "already claimed by rex" in sam.locator("#op-error").inner_text()

    assert as_rex(sam, rex_url, f"/v1/escalations/{escalation}/release") == 200
    sam.wait_for_function("() => document.getElementById('op-meta').textContent.includes('unclaimed')")
    sam.wait_for_selector("#op-error", state="hidden")
    assert sam.locator("#op-claim").is_enabled()


def test_console_shows_a_failed_action_on_the_escalation_it_was_about(open_tab, rex_url):
    """Sam pressed Claim on one escalation and opened another before the answer came: the refusal ("already
    claimed by rex") was shown on the escalation then open, which nobody held, and stayed there."""
    acted = escalate(rex_url, "console-error-switch-a", "Switch A, I want to talk to a human")
    shown = escalate(rex_url, "console-error-switch-b", "Switch B, I want to talk to a human")
    sam = open_tab()
    open_escalation(sam, rex_url, acted)
    held = held_claim(sam, acted)
    assert as_rex(sam, rex_url, f"/v1/escalations/{acted}/claim") == 200
    sam.click(f".op-item[data-id='{shown}']")
    sam.wait_for_function("() => document.getElementById('op-transcript').textContent.includes('Switch B')")
    with sam.expect_response(re.compile(rf".*/v1/escalations/{acted}/claim$")):
        held["claim"].continue_()
    sam.wait_for_selector("#op-notice:not([hidden])")
    assert sam.locator("#op-notice").inner_text() == f"Escalation #{acted}: escalation {acted} is already claimed by rex"
    assert sam.locator("#op-error").is_hidden()
    assert sam.locator("#op-title").inner_text() == f"Escalation #{shown} — open"
    sam.click(f".op-item[data-id='{acted}']")  # read: the notice goes when its escalation is opened
    sam.wait_for_selector("#op-notice", state="hidden")
    assert sam.locator("#op-error").is_hidden()
