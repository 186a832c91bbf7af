"""The console in a real headless Chromium, while the customer's channel is down: an operator's reply whose
send failed waits for its retry, and the operator must not take it for delivered."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import console_server, escalate, sign_in

pytestmark = pytest.mark.browser
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-retrying")
    with console_server(root) as url:
        yield url, root / "gateway.db"


def _store(db, text: str, **values) -> None:
    with sqlite3.connect(db) as connection:
        assignments = ", ".join(f"{column} = ?" for column in values)
        connection.execute(f"UPDATE messages SET {assignments} WHERE author = 'operator' AND text = ?",
                           [*values.values(), text])


def test_console_shows_an_operator_reply_waiting_for_its_retry_until_it_is_sent(open_tab, server):
    """A reply whose send failed for a reason that may pass (the platform's 5xx, a network error) stays
    `pending` until its retry; the console drew it as any delivered reply, so the operator went on, sure
    the customer had it, and no word came when it was sent at last (or refused, minutes later)."""
    url, db = server
    escalation = escalate(url, "console-retrying", "Channel down here, I want to talk to a human")
    operator = open_tab()
    sign_in(operator, url)
    operator.click(f".op-item[data-id='{escalation}']")
    operator.wait_for_selector("#op-transcript .op-msg")
    text = "Your refund is on its way."
    operator.fill("#op-reply", text)
    operator.press("#op-reply", "Enter")
    reply = operator.locator("#op-transcript .op-msg--operator", has_text=text)
    expect(reply).to_have_count(1, timeout=WAIT_MS)
    expect(reply.locator(".op-pending")).to_have_count(0, timeout=WAIT_MS)  # sent: nothing to say

    # What the outbox stores when the platform answered 502: pending again, its retry due in ten minutes.
    due = (datetime.now(timezone.utc) + timedelta(minutes=10)).isoformat()
    _store(db, text, status="pending", error="attempt 1/5 failed, retrying in 600s: telegram: 502 Bad Gateway",
           meta=json.dumps({"operator": "console-operator", "escalation_id": escalation, "next_attempt_at": due}))
    operator.reload()
    operator.wait_for_selector("#op-live:not([hidden])", timeout=WAIT_MS)
    operator.click(f".op-item[data-id='{escalation}']")
    pending = operator.locator("#op-transcript .op-msg--operator", has_text=text).locator(".op-pending")
    expect(pending).to_contain_text("Not delivered yet", timeout=WAIT_MS)
    expect(pending).to_contain_text("502 Bad Gateway")

    # The retry went through: the mark goes without the operator doing anything.
    _store(db, text, status="sent", error=None)
    expect(pending).to_have_count(0, timeout=WAIT_MS)
