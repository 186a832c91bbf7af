"""A knowledge-base document with active HTML, answered by the real app (offline model, no stand-ins),
shown in the widget and in the operator console in a real headless Chromium: it must stay inert text.

tests/web/test_widget_browser.py covers a hostile *model* reply by routing, and
tests/operators/test_console_browser.py hostile *customer* text in the console; this covers the path
from a hostile *document* through ingest, retrieval, the answer and the transcript to both pages.
"""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from tests.web.conftest import (  # noqa: F401 - fixtures
    _prepare,
    ask_in_chat,
    browser,
    chromium_path,
    hostile_images_had_their_turn,
    record_page_errors,
    serving,
    write_config,
)

pytestmark = pytest.mark.browser

HOSTILE_DOC = """# Sync troubleshooting

If sync stops, open the reset page <script>window.__pwned=1</script> and sign in again.
Sync reset instructions: <img src=x onerror="window.__pwned=1"> then press the reset button.
For the sync reset form, follow [this sync reset link](javascript:window.__pwned=1) and confirm.
"""
QUESTION = "How do I reset sync?"
OPERATOR_TOKEN = "hostile-console-operator-token"
ACTIVE = ".gw-msg--bot script, .gw-msg--bot img, .gw-msg--bot iframe, .gw-msg--bot svg"


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory):
    """The folder of the hostile server's stores (its SQLite database is `gateway.db`)."""
    return tmp_path_factory.mktemp("hostile-widget")


@pytest.fixture(scope="module")
def hostile_server(hostile_root):
    """The real app on a real port, answering from one hostile document with the offline model."""
    from gateway.app import create_app
    from gateway.settings import load_settings

    root = hostile_root
    docs = root / "docs"
    docs.mkdir()
    (docs / "sync.md").write_text(HOSTILE_DOC, encoding="utf-8")
    os.environ["REL_CONSOLE_OPERATOR_TOKEN"] = OPERATOR_TOKEN
    config = write_config(root, docs=docs, operator_token_env="REL_CONSOLE_OPERATOR_TOKEN")
    _prepare(config)
    app = create_app(load_settings(config), start_scheduler=False)
    with serving(app) as url:
        yield url


HOSTILE_TOOL_RESULT = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


def _plant_tool_result(root) -> None:
    """Give the bot's first reply in the newest conversation a tool call whose result carries active HTML,
    as a stored turn would."""
    import sqlite3

    db = sqlite3.connect(root / "gateway.db")
    try:
        calls = [{"round": 1, "id": "c1", "name": "lookup_order", "arguments": {"order": "<b>1</b>"},
                  "result": {"note": HOSTILE_TOOL_RESULT}, "replayed": True}]
        # The newest conversation's first answer (the widget test's conversation comes first).
        db.execute("UPDATE messages SET tool_calls = ? WHERE id = (SELECT min(id) FROM messages WHERE author = 'bot'"
                   " AND conversation_id = (SELECT max(conversation_id) FROM messages))", (json.dumps(calls),))
        db.commit()
    finally:
        db.close()


def test_widget_hostile_document_answer_renders_as_inert_text(browser, hostile_server):  # noqa: F811
    # The API's reply really carries markup from the document, so the page has something to defuse.
    request = urllib.request.Request(hostile_server + "/v1/bots/acme/chat", method="POST",
                                     data=json.dumps({"session_id": "probe", "text": QUESTION}).encode(),
                                     headers={"content-type": "application/json"})
    reply = json.load(urllib.request.urlopen(request, timeout=60))["reply"] or ""
    assert any(marker in reply for marker in ("<script", "onerror", "javascript:")), reply

    context = browser.new_context()
    page = context.new_page()
    events: list[str] = []
    record_page_errors(page, events)
    try:
        ask_in_chat(page, hostile_server + "/", QUESTION)
        page.wait_for_function(
            """() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'
                     && [...document.querySelectorAll('.gw-msg--bot .gw-bubble')].some(b => b.textContent.trim())""",
            timeout=60_000)
        hostile_images_had_their_turn(page)
        shown = page.locator(".gw-msg--bot .gw-bubble").last.inner_text()
        assert any(marker in shown for marker in ("<script", "onerror", "javascript:")), shown  # shown as text
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator(ACTIVE).count() == 0
        hrefs = page.eval_on_selector_all(".gw-msg--bot a", "els => els.map(a => a.getAttribute('href') || '')")
        assert not [h for h in hrefs if h.strip().lower().startswith(("javascript:", "data:", "vbscript:"))], hrefs
        assert events == []
    finally:
        context.close()


def test_console_hostile_document_answer_renders_as_inert_text(browser, hostile_server, hostile_root):  # noqa: F811
    context, console = browser.new_context(), browser.new_context()
    customer, operator = context.new_page(), console.new_page()
    events: list[str] = []
    for tab in (customer, operator):
        record_page_errors(tab, events)
    try:
        ask_in_chat(customer, hostile_server + "/", QUESTION)
        customer.wait_for_function(
            "() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'"
            " && document.querySelectorAll('.gw-msg--bot').length >= 1", timeout=60_000)
        customer.fill("#gw-input", "I want to talk to a human")
        customer.press("#gw-input", "Enter")

        # A tool result is text from another system: planted markup in it must stay inert too.
        customer.wait_for_function("() => document.querySelectorAll('.gw-msg--bot').length >= 2", timeout=60_000)
        _plant_tool_result(hostile_root)

        operator.goto(hostile_server + "/operator")
        operator.fill("#op-token", OPERATOR_TOKEN)
        operator.press("#op-token", "Enter")
        operator.wait_for_selector("body[data-ready='true']")
        operator.wait_for_selector(".op-item", timeout=60_000)
        operator.locator(".op-item").first.click()
        operator.wait_for_selector("#op-transcript .op-msg", timeout=60_000)
        hostile_images_had_their_turn(operator)
        transcript = operator.locator("#op-transcript").inner_text()
        assert any(marker in transcript for marker in ("<script", "onerror", "javascript:")), transcript
        operator.locator(".op-tools summary").first.click()
        tool_text = operator.locator(".op-tools").first.inner_text()
        assert "lookup_order" in tool_text and HOSTILE_TOOL_RESULT in tool_text.replace("\\", ""), tool_text
        assert "(run once, by an earlier attempt)" in tool_text  # a call a crashed attempt made, not run twice
        assert operator.evaluate("() => window.__pwned") is None
        assert operator.locator("#op-transcript script, #op-transcript img, #op-transcript iframe, "
                                "#op-transcript svg").count() == 0
        hrefs = operator.eval_on_selector_all("#op-transcript a", "els => els.map(a => a.getAttribute('href') || '')")
        assert not [h for h in hrefs if h.strip().lower().startswith(("javascript:", "data:", "vbscript:"))], hrefs
        assert events == []
    finally:
        context.close()
        console.close()  # its live event stream would otherwise hold the server open at shutdown
