"""The console shows the files a customer sent (a photo alone has no text): the transcript and the list said
nothing of them, an empty message and an empty quote, “”."""

from __future__ import annotations

import json
import sqlite3

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
