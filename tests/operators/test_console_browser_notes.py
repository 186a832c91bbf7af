"""The console's note box in a real headless Chromium: a note of several lines, written from the keyboard."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import CONSOLE_TOKEN
from tests.operators.test_console_browser_list import _opened

pytestmark = pytest.mark.browser


def test_console_adds_a_note_of_several_lines_with_the_reply_boxs_keys(open_tab, live_url):
    """The note box was a one-line input: Shift+Enter added the note instead of starting a new line, so "what was
    tried, what to check" went as one line or as several notes, and a pasted note lost its line breaks."""
    operator, escalation = _opened(open_tab, live_url, "console-note-lines", "Notes here, I want to talk to a human")
    operator.focus("#op-note")
    operator.keyboard.type("Tried a refund:")
    operator.keyboard.press("Shift+Enter")
    operator.keyboard.type("the card was declined.")
    assert operator.locator("#op-note").input_value() == "Tried a refund:\nthe card was declined."
    with operator.expect_response(lambda r: r.url.endswith("/notes")) as added:
        operator.keyboard.press("Enter")  # as in the reply box: Enter sends
    assert added.value.ok
    operator.wait_for_function("() => document.getElementById('op-notes').textContent.includes('declined')")
    # Emptied when the POST's answer is read, a step of its own: the reading the note's live event asked for
    # may draw the notes before it.
    expect(operator.locator("#op-note")).to_have_value("")
    assert operator.locator("#op-notes li").last.inner_text().endswith("Tried a refund:\nthe card was declined.")
    stored = operator.request.get(f"{live_url}/v1/escalations/{escalation}",
                                  headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"}).json()["notes"]
    assert [n["text"] for n in stored] == ["Tried a refund:\nthe card was declined."]
    assert "Shift+Enter" in operator.locator("#op-note-hint").inner_text()
    assert operator.locator("#op-note").get_attribute("aria-describedby") == "op-note-hint"


def test_console_clears_a_note_the_server_took_though_the_redraw_after_it_failed(open_tab, live_url):
    """The box was emptied only once the escalation had been drawn again: when that read failed, the note stayed
    in the box under an error, as if unsent, and a second Enter added it twice."""
    operator, escalation = _opened(open_tab, live_url, "console-note-redraw", "Notes, I want to talk to a human")
    operator.route(re.compile(rf".*/v1/escalations/{escalation}(\?.*)?$"), lambda route: route.abort("connectionfailed"))
    operator.fill("#op-note", "Called the bank.")
    with operator.expect_response(lambda r: r.url.endswith("/notes")) as added:
        operator.press("#op-note", "Enter")
    assert added.value.ok
    operator.wait_for_function("() => !document.getElementById('op-error').hidden")
    # The note's live event reads the escalation too (and fails): its error may come before the POST's answer.
    expect(operator.locator("#op-note")).to_have_value("")
    operator.press("#op-note", "Enter")  # nothing left to send
    stored = operator.request.get(f"{live_url}/v1/escalations/{escalation}",
                                  headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"}).json()["notes"]
    assert [n["text"] for n in stored] == ["Called the bank."]
