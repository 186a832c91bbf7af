"""The console for an operator with a screen reader, in a real headless Chromium: what is read out."""

from __future__ import annotations

import pytest

from tests.operators.conftest import escalate, open_escalation

pytestmark = pytest.mark.browser


def test_console_announces_the_customers_new_message_and_nothing_else(open_tab, live_url):
    """The customer wrote in the escalation open on the screen, and a screen reader said nothing: the
    transcript is no live region (drawn again on every event, it would be read out whole). A polite live
    region says the new customer message alone: not the earlier ones, not the operator's own actions."""
    session = "console-announce"
    escalation = escalate(live_url, session, "Announce here, I want to talk to a human")
    operator = open_tab()
    open_escalation(operator, live_url, escalation)
    region = operator.locator("#op-announce")
    assert region.get_attribute("aria-live") == "polite" and region.inner_text() == ""
    operator.request.post(f"{live_url}/v1/bots/acme/chat", data={"session_id": session, "text": "Are you there?"})
    operator.wait_for_function("() => document.getElementById('op-announce').textContent !== ''")
    assert region.text_content() == "The customer wrote: Are you there?"
    # The operator's own note draws the escalation again: nothing new is said.
    operator.fill("#op-note", "checking the invoice")
    operator.press("#op-note", "Enter")
    operator.wait_for_function("() => document.getElementById('op-notes').textContent.includes('checking')")
    assert region.text_content() == "The customer wrote: Are you there?"
    # Another escalation opened: what this customer said is not read out as news there.
    other = escalate(live_url, "console-announce-2", "Other, I want to talk to a human")
    operator.click(f".op-item[data-id='{other}']")
    operator.wait_for_function(f"() => document.getElementById('op-title').textContent.includes('#{other}')")
    assert region.text_content() == ""
