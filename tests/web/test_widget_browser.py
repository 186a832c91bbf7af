"""The web chat widget in a real headless Chromium, against the real app on a real port.

Where a test needs an answer the offline bot cannot give (hostile markup, an operator holding the
thread), Playwright's request routing stands in for the server on that one endpoint; everything else
(the page, the scripts, the other endpoints) is the real app.
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.browser

QUESTION = "How do I fix sync error E-SYNC-409?"
ANSWER_WAIT_MS = 60_000


def _open(page, live_server) -> None:
    page.goto(live_server.url + "/")
    page.wait_for_selector("#gw-chat[data-ready='true']")


def _ask(page, text: str) -> None:
    page.fill("#gw-input", text)
    page.press("#gw-input", "Enter")


def _wait_bot_text(page, *, timeout: float = ANSWER_WAIT_MS) -> str:
    # Done means: the send finished (no longer busy) and a non-empty answer is on the page.
    page.wait_for_function(
        """() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'
                 && [...document.querySelectorAll('.gw-msg--bot .gw-bubble')].some(b => b.textContent.trim())""",
        timeout=timeout,
    )
    return page.locator(".gw-msg--bot .gw-bubble").last.inner_text()


def _after_a_poll(page) -> None:
    """Returns once a whole transcript poll (asked, answered, drawn) came after the call: the widget asks again
    only when its last poll's answer is drawn, so the second request from here on follows a whole poll."""
    for _ in range(2):
        with page.expect_request("**/v1/bots/acme/sessions/*/messages*", timeout=ANSWER_WAIT_MS):
            pass


def _sse(*events: tuple[str, dict]) -> str:
    return "".join(f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n" for name, data in events)


def test_widget_answers_with_citation_and_keeps_session_on_reload(page, live_server):
    _open(page, live_server)
    _ask(page, QUESTION)

    answer = _wait_bot_text(page)
    assert re.search(r"409|conflict", answer, re.IGNORECASE), answer
    page.wait_for_selector(".gw-msg--bot .gw-source")
    sources = page.locator(".gw-msg--bot .gw-source").all_inner_texts()
    assert any(s.strip() for s in sources), sources
    assert page.locator(".gw-msg--contact .gw-bubble").all_inner_texts() == [QUESTION]
    session_id = page.evaluate("() => localStorage.getItem('gw.session.acme')")
    assert session_id and session_id.startswith("web-")

    # One polling round later the stored copies must not be shown a second time (a fixed 3.5 s could pass
    # before it on a loaded machine, and the test with it).
    _after_a_poll(page)
    assert page.locator(".gw-msg--contact").count() == 1
    assert page.locator(".gw-msg--bot").count() == 1

    page.reload()
    page.wait_for_selector("#gw-chat[data-ready='true']")
    assert page.evaluate("() => localStorage.getItem('gw.session.acme')") == session_id
    assert page.locator(".gw-msg--contact .gw-bubble").all_inner_texts() == [QUESTION]
    reloaded = page.locator(".gw-msg--bot .gw-bubble").all_inner_texts()
    assert reloaded and answer.strip() in "\n\n".join(t.strip() for t in reloaded)
    assert page.locator(".gw-msg--bot .gw-source").count() >= 1
    assert page.errors == []


HOSTILE_TEXT = (
    "Click <a href=\"javascript:window.__pwned=1\">here</a> <script>window.__pwned=1</script>"
    "<img src=x onerror=\"window.__pwned=1\"><svg onload=\"window.__pwned=1\"></svg>"
    "<iframe src=\"javascript:window.__pwned=1\"></iframe>"
)
HOSTILE_CITATIONS = [
    {"source": "a.md", "title": "<img src=x onerror=window.__pwned=1>", "url": "javascript:window.__pwned=1"},
    {"source": "b.md", "title": "data url", "url": "data:text/html,<script>window.__pwned=1</script>"},
    {"source": "c.md", "title": "spaced scheme", "url": "  JaVaScRiPt:window.__pwned=1"},
    {"source": "d.md", "title": "vbscript", "url": "vbscript:msgbox(1)"},
    {"source": "e.md", "title": "relative", "url": "/static/widget.js"},
    {"source": "f.md", "title": "<b>Real page</b>", "url": "https://help.acme-notes.example/sync?x=<y>"},
]


def test_widget_renders_hostile_reply_and_citations_as_inert_text(page, live_server):
    def hostile_chat(route):
        done = {"reply": HOSTILE_TEXT, "citations": HOSTILE_CITATIONS, "conversation_id": 1, "state": "bot",
                "message_id": 1}
        route.fulfill(status=200, headers={"content-type": "text/event-stream"},
                      body=_sse(("token", {"text": "<script>window.__pwned=1</script>"}), ("done", done)))

    page.route("**/v1/bots/acme/chat", hostile_chat)
    _open(page, live_server)
    _ask(page, "<img src=x onerror=\"window.__pwned=1\">")
    page.wait_for_selector(".gw-msg--bot .gw-sources")

    transcript = page.locator("#gw-transcript")
    assert transcript.locator("script, img, svg, iframe, b").count() == 0
    assert page.locator(".gw-msg--bot .gw-bubble").inner_text() == HOSTILE_TEXT
    assert page.locator(".gw-msg--contact .gw-bubble").inner_text() == "<img src=x onerror=\"window.__pwned=1\">"
    hrefs = transcript.locator("a").evaluate_all("links => links.map(a => a.href)")
    assert hrefs == ["https://help.acme-notes.example/sync?x=%3Cy%3E"]
    titles = page.locator(".gw-msg--bot .gw-source").all_inner_texts()
    assert "<img src=x onerror=window.__pwned=1>" in titles and "<b>Real page</b>" in titles

    # The same rules through the public renderer, for an operator's message and tricky URL spellings.
    page.evaluate("""() => window.GatewayWidget.appendMessage({id: 999, direction: 'out', author: 'operator',
        text: '<img src=x onerror=window.__pwned=1>', citations: [{source: 's', title: 't', url: 'data:,x'}]})""")
    assert transcript.locator("img, a[href^='data:']").count() == 0
    verdicts = page.evaluate("""() => ['javascript:alert(1)', '\\tjavascript:alert(1)', 'data:text/html,x',
        '//evil.example/x', 'http://ok.example/', 'HTTPS://OK.example/a'].map(window.GatewayWidget.safeHttpUrl)""")
    assert verdicts == [None, None, None, None, "http://ok.example/", "https://ok.example/a"]
    assert page.evaluate("() => window.__pwned") is None
    assert page.errors == []


def test_widget_refuses_empty_and_overlong_input_with_visible_message(page, live_server):
    sent = []
    page.on("request", lambda request: sent.append(request.url) if request.method == "POST" else None)
    _open(page, live_server)

    page.fill("#gw-input", "   ")
    page.press("#gw-input", "Enter")
    assert page.locator("#gw-error").is_visible()
    assert "type a message" in page.locator("#gw-error").inner_text()

    too_long = "x" * 4001
    page.fill("#gw-input", too_long)
    page.click("#gw-send")
    error = page.locator("#gw-error").inner_text()
    assert "too long" in error and "4001" in error and "4000" in error
    assert page.locator("#gw-input").input_value() == too_long
    assert page.locator("#gw-input").get_attribute("aria-invalid") == "true"
    assert page.locator(".gw-msg").count() == 0
    assert sent == []


def test_widget_falls_back_to_json_when_streaming_fails(page, live_server):
    accepts = []

    def break_streaming(route):
        accept = route.request.headers.get("accept", "")
        accepts.append(accept)
        if "text/event-stream" in accept:
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/v1/bots/acme/chat", break_streaming)
    _open(page, live_server)
    _ask(page, "How long is the password reset link valid?")

    answer = _wait_bot_text(page)
    assert answer.strip()
    assert len(accepts) == 2
    assert "text/event-stream" in accepts[0] and "application/json" in accepts[1]
    page.wait_for_selector(".gw-msg--bot .gw-source")
    assert not page.locator("#gw-error").is_visible()


def test_widget_shows_handoff_notice_then_polls_in_operator_reply(page, live_server):
    """The real escalation path; only the operator's claim (state "operator") and message are added to the
    real transcript response. The banner follows `state`: in the `done` reply, in the transcript, after a
    reload."""
    operator_text = "Hi, this is Sam from support <b>not bold</b>. Let me check your invoice."
    operator_joined: list[bool] = []

    def transcript_plus_operator(route):
        response = route.fetch()
        body = response.json()
        # Always re-sent, as a server would on a retried poll: the widget must still show it once.
        if operator_joined:
            body["state"] = "operator"
            body["messages"].append({"id": 10**6, "direction": "out", "author": "operator", "text": operator_text,
                                     "citations": [], "created_at": "2026-11-29T10:00:00+00:00"})
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/v1/bots/acme/sessions/*/messages*", transcript_plus_operator)
    _open(page, live_server)
    _ask(page, "I want to talk to a human")
    acknowledgement = _wait_bot_text(page)
    assert acknowledgement.strip()
    # The acknowledgement's own `done` says "waiting": the banner shows at once, not only after a poll.
    assert page.locator("#gw-handoff").is_visible()
    assert "will reply here" in page.locator("#gw-handoff").inner_text()
    _ask(page, "Are you there?")
    page.wait_for_function("() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'"
                           " && document.querySelectorAll('.gw-msg--contact').length === 2", timeout=ANSWER_WAIT_MS)
    assert page.locator("#gw-handoff").is_visible()
    assert page.locator("#gw-handoff").get_attribute("data-state") == "waiting"
    assert page.locator(".gw-msg--bot").count() == 1  # no answer from the bot while a person holds the thread

    page.reload()
    page.wait_for_selector("#gw-chat[data-ready='true']")
    assert page.locator("#gw-handoff").is_visible()
    assert "will reply here" in page.locator("#gw-handoff").inner_text()

    operator_joined.append(True)
    page.wait_for_selector(".gw-msg--operator", timeout=10_000)
    assert page.locator(".gw-msg--operator .gw-bubble").inner_text() == operator_text
    assert page.locator("#gw-transcript b").count() == 0
    assert page.locator("#gw-handoff").is_visible()
    assert "joined" in page.locator("#gw-handoff").inner_text()
    _after_a_poll(page)  # a poll again: the operator's message, sent again, is still shown once
    assert page.locator(".gw-msg--operator").count() == 1
    assert page.locator(".gw-msg--contact").count() == 2

    page.reload()
    page.wait_for_selector("#gw-chat[data-ready='true']")
    assert "joined" in page.locator("#gw-handoff").inner_text()
    assert page.locator(".gw-msg--operator").count() == 1
    assert page.errors == []


def test_widget_shows_no_handoff_banner_when_reply_is_null_but_bot_holds_the_thread(page, live_server):
    """A null reply with state "bot" (rate limited, or handed back just now): no person is coming."""
    served: list[bool] = []

    def null_reply_as_bot(route):
        served.append(True)
        route.fulfill(status=200, headers={"content-type": "application/json"},
                      body=json.dumps({"reply": None, "citations": [], "conversation_id": 1, "state": "bot",
                                       "message_id": 1}))

    page.route("**/v1/bots/acme/chat", null_reply_as_bot)
    _open(page, live_server)
    _ask(page, "one more question: how do I export?")
    page.wait_for_function("() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'",
                           timeout=ANSWER_WAIT_MS)
    assert served and page.locator("#gw-handoff").is_hidden()
    assert page.errors == []


def test_widget_says_so_when_its_bot_parameter_names_no_bot(page, live_server):
    """An embed's `?bot=` with a typo opened the first bot's chat without a word, which may be another
    business's assistant; it now says there is no such assistant and offers no chat."""
    page.goto(live_server.url + "/?bot=acme-typo")
    page.wait_for_selector("#gw-error:not([hidden])")
    assert page.locator("#gw-error").inner_text() == "There is no assistant named \u201cacme-typo\u201d here."
    assert page.locator("#gw-chat[data-ready='true']").count() == 0
    assert page.errors == []
    page.goto(live_server.url + "/?bot=acme")  # the right name still opens its chat
    page.wait_for_selector("#gw-chat[data-ready='true']")
    assert page.locator("#gw-error").is_hidden()


def test_widget_naming_no_bot_keeps_saying_so_and_takes_no_message(page, live_server):
    """The notice of a `?bot=` naming no bot was the only word on the page, and the composer stayed open: the first
    letter typed cleared the notice, and Send then did nothing at all, with nothing left to say why."""
    page.goto(live_server.url + "/?bot=acme-typo")
    page.wait_for_selector("#gw-error:not([hidden])")
    page.focus("#gw-input")
    page.keyboard.type("Hello, is anyone there?")
    page.keyboard.press("Enter")
    assert page.locator("#gw-error").is_visible()
    assert page.locator("#gw-error").inner_text() == "There is no assistant named \u201cacme-typo\u201d here."
    assert not page.locator("#gw-input").is_editable() and page.locator("#gw-send").is_disabled()
    assert page.errors == []
