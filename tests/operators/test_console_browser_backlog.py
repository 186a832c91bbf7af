"""The console in a backlog: the API lists the open escalations whose customers have waited longest, a page of
them, and counts them all (`counts`). The tab's "(N waiting)" counted the items listed, so it said 200 with 206
waiting, and nothing said the list was cut. Its own module: its app's database holds the backlog."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from playwright.sync_api import expect

from gateway.operators.api import LIST_PAGE
from tests.operators.conftest import WAIT_MS, sign_in

pytestmark = pytest.mark.browser

BACKLOG = LIST_PAGE + 5


def test_the_title_counts_every_customer_waiting_and_the_list_says_it_is_cut(open_tab, live_url, console_root):
    start = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=2)
    with sqlite3.connect(console_root / "gateway.db") as db:  # handed over in an outage, before the console opened
        for i in range(BACKLOG):
            at = (start + timedelta(seconds=i)).isoformat(" ")
            conversation = db.execute(
                "INSERT INTO conversations (bot, channel, workspace, chat, thread, state, unanswered_turns, created_at,"
                " updated_at) VALUES ('acme', 'web', '', ?, '', 'waiting', 0, ?, ?)", (f"backlog-{i}", at, at)).lastrowid
            db.execute("INSERT INTO escalations (conversation_id, bot, state, reason, notes, created_at)"
                       " VALUES (?, 'acme', 'open', 'model outage', '[]', ?)", (conversation, at))
    operator = open_tab()
    sign_in(operator, live_url)
    expect(operator.locator(".op-item")).to_have_count(LIST_PAGE, timeout=WAIT_MS)
    expect(operator).to_have_title(f"({BACKLOG} waiting) Operator console")
    more = operator.locator("#op-list-more")
    expect(more).to_have_text(f"Showing the {LIST_PAGE} who have waited longest of {BACKLOG} waiting.")

    # A customer more asks for a person: its live event reads the list again, and the count has them (their
    # escalation, the newest, is not listed: `escalate` would not find it).
    request = urllib.request.Request(live_url + "/v1/bots/acme/chat", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"session_id": "console-backlog", "text": "I want to talk to a human"}).encode())
    urllib.request.urlopen(request, timeout=60).read()
    expect(operator).to_have_title(f"({BACKLOG + 1} waiting) Operator console", timeout=WAIT_MS)
    expect(more).to_have_text(f"Showing the {LIST_PAGE} who have waited longest of {BACKLOG + 1} waiting.")
