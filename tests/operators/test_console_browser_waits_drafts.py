"""The console across time: how long a released escalation's customer has waited."""

from __future__ import annotations

import sqlite3

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import CONSOLE_TOKEN, escalate, sign_in

pytestmark = pytest.mark.browser


def test_console_counts_a_released_escalations_wait_from_its_release(open_tab, live_url, console_root):
    """"waiting N min" counted from the escalation's opening: one claimed two hours ago and released just now
    showed "waiting 2 h 00 min" and jumped to the top of the list, above a customer who had truly waited."""
    released = escalate(live_url, "console-released", "Released here, I want to talk to a human")
    other = escalate(live_url, "console-released-other", "Other here, I want to talk to a human")
    with sqlite3.connect(console_root / "gateway.db") as db:  # opened two hours ago, the other one hour ago
        db.execute("UPDATE escalations SET created_at = datetime(created_at, '-2 hours') WHERE id = ?", (released,))
        db.execute("UPDATE escalations SET created_at = datetime(created_at, '-1 hours') WHERE id = ?", (other,))
    operator = open_tab()
    token = {"Authorization": f"Bearer {CONSOLE_TOKEN}"}
    for action in ("claim", "release"):
        assert operator.request.post(f"{live_url}/v1/escalations/{released}/{action}", headers=token).status == 200
    sign_in(operator, live_url)
    wait = operator.locator(f".op-item[data-id='{released}'] .op-wait")
    expect(wait).to_have_text("waiting <1 min")
    assert wait.get_attribute("title").startswith("released ") and "escalated" in wait.get_attribute("title")
    expect(operator.locator(f".op-item[data-id='{other}'] .op-wait")).to_have_text("waiting 1 h 00 min")
    shown = operator.locator(".op-item").evaluate_all("items => items.map(b => Number(b.dataset.id))")
    assert shown.index(other) < shown.index(released)

