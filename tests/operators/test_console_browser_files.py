"""The console shows the files a customer sent (a photo alone has no text): the transcript and the list said
nothing of them, an empty message and an empty quote, “”."""

from __future__ import annotations

import json
import sqlite3
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import escalate, sign_in

pytestmark = pytest.mark.browser


def test_console_names_the_files_of_a_customers_message(open_tab, live_url, console_root):
    escalation = escalate(live_url, "console-files", "Files here, I want to talk to a human")
    with sqlite3.connect(console_root / "gateway.db") as db:  # as a Telegram photo without a caption is stored
        db.execute("UPDATE messages SET text = '', attachments = ? WHERE direction = 'in' AND conversation_id = "
                   "(SELECT conversation_id FROM escalations WHERE id = ?)",
                   (json.dumps([{"kind": "image", "file_id": "AgAD"}, {"kind": "audio"}]), escalation))
    operator = open_tab()
    sign_in(operator, live_url)
    item = operator.locator(f".op-item[data-id='{escalation}']")
    expect(item).to_contain_text("Sent 2 files (image, audio), not shown here")
    assert "“”" not in item.inner_text()
    item.click()
    shown = operator.locator("#op-transcript .op-msg--contact .op-files")
    expect(shown).to_have_text("Sent 2 files (image, audio), not shown here")
    assert "AgAD" not in operator.locator("#op-transcript").inner_text()


def test_console_marks_a_customers_edit_with_the_words_it_replaces(open_tab, live_url, console_root):
    """A customer's edit made while a held message was handled (`meta.edit_of`) read as a second message."""
    escalation = escalate(live_url, "console-edit", "Please refund 10 EUR, I want to talk to a human")
    body = json.dumps({"session_id": "console-edit", "text": "Please refund 12 EUR, I want to talk to a human"}).encode()
    urllib.request.urlopen(urllib.request.Request(live_url + "/v1/bots/acme/chat", data=body,
                                                  headers={"Content-Type": "application/json"}), timeout=60).read()
    with sqlite3.connect(console_root / "gateway.db") as db:  # the second stored as the first's edit is
        first, second = [row[0] for row in db.execute(
            "SELECT id FROM messages WHERE direction = 'in' AND conversation_id = "
            "(SELECT conversation_id FROM escalations WHERE id = ?) ORDER BY id", (escalation,))]
        db.execute("UPDATE messages SET meta = json_set(meta, '$.edit_of', ?) WHERE id = ?", (first, second))
    operator = open_tab()
    sign_in(operator, live_url)
    operator.locator(f".op-item[data-id='{escalation}']").click()
    edit = operator.locator(f"#op-transcript .op-msg[data-id='{second}']")
    expect(edit.locator(".op-author")).to_contain_text("Customer (edited)")
    expect(edit.locator(".op-replaces")).to_have_text("It replaces: “Please refund 10 EUR, I want to talk to a human”")
    expect(operator.locator(f"#op-transcript .op-msg[data-id='{first}'] .op-author")).not_to_contain_text("edited")
