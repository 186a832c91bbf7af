"""The widget when things go wrong or get busy, in a real headless Chromium against the real app.

Playwright's routing stands in for the chat or transcript endpoint where a test needs an answer the
offline bot cannot give (slow, interrupted, refused, out of order); the page and its scripts are the
real ones. Nothing here asserts timing beyond generous waits.
"""

from __future__ import annotations

import json
import re
import urllib.request
from urllib.parse import parse_qs, urlparse

import pytest

from tests.web.page_fetches import FETCHES, wait_read
from tests.web.test_widget_browser import ANSWER_WAIT_MS, _after_a_poll, _ask, _open, _sse, _wait_bot_text

pytestmark = pytest.mark.browser

POLL_WAIT_MS = 15_000  # a few polling rounds (every 3 s)


class FakeTranscript:
    """Stands in for GET …/messages: serves `messages` after the `after` id, with `state`."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.state = "bot"

    def add(self, id_: int, author: str, text: str, *, status: str = "done", citations: list | None = None) -> None:
        self.messages.append({"id": id_, "direction": "in" if author == "contact" else "out", "author": author,
                              "text": text, "citations": citations or [], "status": status,
                              "created_at": "2026-12-01T10:00:00+00:00"})

    def handle(self, route) -> None:
        after = int(parse_qs(urlparse(route.request.url).query).get("after", ["0"])[0] or 0)
        body = {"conversation_id": 1, "state": self.state, "messages": [m for m in self.messages if m["id"] > after]}
        route.fulfill(status=200, headers={"content-type": "application/json"}, body=json.dumps(body))


def _fake_transcript(page) -> FakeTranscript:
    fake = FakeTranscript()
    page.route("**/v1/bots/acme/sessions/*/messages*", fake.handle)
    return fake


def _idle(page, timeout: float = ANSWER_WAIT_MS) -> None:
    page.wait_for_function("() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'",
                           timeout=timeout)


def _two_bots(page) -> None:
    """The page offers acme and beta; beta's conversation is empty."""
    page.route("**/v1/bots", lambda route: route.fulfill(
        status=200, headers={"content-type": "application/json"},
        body=json.dumps({"bots": [{"name": "acme"}, {"name": "beta"}]})))
    page.route("**/v1/bots/beta/sessions/*/messages*", lambda route: route.fulfill(
        status=200, headers={"content-type": "application/json"},
        body=json.dumps({"conversation_id": None, "state": "bot", "messages": []})))


def _bubbles(page) -> list[str]:
    return [t.strip() for t in page.locator("#gw-transcript .gw-bubble").all_inner_texts()]


# ---- 2: an answer slower than worker.reply_timeout ----

def test_widget_keeps_partial_answer_and_neutral_status_when_reply_is_pending(page, live_server):
    transcript = _fake_transcript(page)
    pending = {"reply": None, "citations": [], "conversation_id": 1, "state": "bot", "message_id": 1,
               "pending": True}
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"},
        body=_sse(("token", {"text": "Open Settings, then"}), ("done", pending))))
    _open(page, live_server)
    _ask(page, "How do I sync?")
    _idle(page)

    partial = page.locator(".gw-msg--bot.gw-msg--partial .gw-bubble")
    assert partial.inner_text() == "Open Settings, then"
    assert page.locator("#gw-typing").is_visible()
    assert "longer than usual" in page.locator("#gw-status").inner_text()
    assert page.locator("#gw-status").get_attribute("role") == "status"
    assert page.locator("#gw-error").is_hidden()

    transcript.add(1, "contact", "How do I sync?")
    transcript.add(2, "bot", "Open Settings, then press Sync now.")
    page.wait_for_selector("#gw-status", state="hidden", timeout=POLL_WAIT_MS)
    assert _bubbles(page) == ["How do I sync?", "Open Settings, then press Sync now."]
    assert page.locator(".gw-msg--partial").count() == 0
    assert page.locator("#gw-typing").is_hidden()
    assert page.locator("#gw-error").is_hidden()
    assert page.errors == []


# ---- 3: the stream breaks (restart, network drop) ----

BREAKING_STREAM = """
(() => {
  const realFetch = window.fetch;
  window.fetch = (url, init) => {
    if (String(url).endsWith('/chat') && init && /event-stream/.test(init.headers.Accept)) {
      const enc = new TextEncoder();
      const body = new ReadableStream({
        start(controller) {
          controller.enqueue(enc.encode('event: token\\ndata: {"text": "Restart the app"}\\n\\n'));
          setTimeout(() => controller.error(new TypeError('network error')), 50);
        },
      });
      return Promise.resolve(new Response(body, {status: 200, headers: {'content-type': 'text/event-stream'}}));
    }
    return realFetch(url, init);
  };
})();
"""


def test_widget_maps_broken_stream_to_interrupted_notice_and_clears_it_when_answer_arrives(page, live_server):
    page.add_init_script(BREAKING_STREAM)
    transcript = _fake_transcript(page)
    _open(page, live_server)
    _ask(page, "Why does sync fail?")
    _idle(page)

    assert "interrupted" in page.locator("#gw-status").inner_text()
    assert page.locator("#gw-error").is_hidden()  # no raw "network error"
    assert "network error" not in page.locator("#gw-chat").inner_text()
    assert page.locator(".gw-msg--partial .gw-bubble").inner_text() == "Restart the app"
    assert page.locator("#gw-typing").is_visible()

    transcript.add(7, "contact", "Why does sync fail?")
    transcript.add(8, "bot", "Restart the app and sign in again.")
    page.wait_for_selector("#gw-status", state="hidden", timeout=POLL_WAIT_MS)
    assert _bubbles(page) == ["Why does sync fail?", "Restart the app and sign in again."]
    assert page.locator("#gw-error").is_hidden() and page.locator("#gw-typing").is_hidden()
    assert page.errors == []


# ---- 4: a send that fails is marked and retried with the same message_id ----

@pytest.mark.parametrize("failure", ["503", "502-html", "dropped"])
def test_widget_marks_failed_send_and_retries_with_same_message_id(page, live_server, failure):
    bodies: list[dict] = []
    broken = [True]

    def flaky(route):
        bodies.append(json.loads(route.request.post_data or "{}"))
        if not broken[0]:
            route.continue_()
        elif failure == "503":
            route.fulfill(status=503, headers={"content-type": "application/json", "retry-after": "5"},
                          body=json.dumps({"error": "the database is unavailable; try again shortly"}))
        elif failure == "502-html":
            route.fulfill(status=502, headers={"content-type": "text/html"},
                          body="<html><body><h1>502 Bad Gateway</h1></body></html>")
        else:
            route.abort("connectionreset")

    page.route("**/v1/bots/acme/chat", flaky)
    _open(page, live_server)
    _ask(page, "How long is the password reset link valid?")
    _idle(page)

    failed = page.locator(".gw-msg--contact.gw-msg--failed")
    assert failed.count() == 1
    assert "Not sent" in failed.inner_text()
    assert page.locator("#gw-error").is_visible()
    assert "Failed to fetch" not in page.locator("#gw-error").inner_text()
    assert "<h1>" not in page.locator("#gw-error").inner_text()

    broken[0] = False
    failed.get_by_role("button", name=re.compile("Retry")).click()
    answer = _wait_bot_text(page)
    assert answer.strip()
    assert page.locator(".gw-msg--failed").count() == 0
    assert page.locator(".gw-msg--contact").count() == 1
    ids = {b.get("message_id") for b in bodies}
    assert len(bodies) >= 2 and len(ids) == 1 and None not in ids, bodies
    _after_a_poll(page)  # a polling round: the stored copy is not shown twice
    assert page.locator(".gw-msg--contact").count() == 1
    assert page.errors == []


def test_widget_clears_not_sent_when_the_transcript_shows_the_message_was_stored(page, live_server):
    def stored_then_502(route):  # a proxy that lost the answer after the gateway stored the message
        route.fetch(headers={**route.request.headers, "accept": "application/json"})
        route.fulfill(status=502, headers={"content-type": "text/html"}, body="<h1>Bad Gateway</h1>")

    page.route("**/v1/bots/acme/chat", stored_then_502)
    _open(page, live_server)
    _ask(page, "How long is the password reset link valid?")
    _idle(page)
    page.wait_for_selector(".gw-msg--bot", timeout=POLL_WAIT_MS)  # the stored answer, by the transcript
    page.wait_for_selector(".gw-msg--failed", state="detached", timeout=POLL_WAIT_MS)
    assert page.locator(".gw-msg--contact").count() == 1
    assert page.locator(".gw-msg--contact .gw-failed").count() == 0
    assert page.locator("#gw-error").is_hidden()
    assert page.errors == []


# ---- 5: a request that never returns ----

def test_widget_gives_up_on_hung_request_and_follows_the_transcript(page, live_server):
    with urllib.request.urlopen(live_server.url + "/v1/bots") as response:
        assert response.headers["Gateway-Reply-Timeout"] == "60"  # worker.reply_timeout's default

    def short_reply_timeout(route):  # as a server configured with worker.reply_timeout: 2
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "gateway-reply-timeout": "2"})

    page.clock.install()
    page.route("**/v1/bots", short_reply_timeout)
    transcript = _fake_transcript(page)
    page.route("**/v1/bots/acme/chat", lambda route: None)  # never answered
    _open(page, live_server)
    _ask(page, "Is anyone there?")
    page.wait_for_selector(".gw-msg--contact")
    assert page.locator("#gw-form").get_attribute("aria-busy") == "true"

    page.clock.fast_forward(10_000)  # past that reply_timeout and the slack, far short of the 60 s default
    _idle(page, timeout=10_000)
    assert "longer than usual" in page.locator("#gw-status").inner_text()
    assert page.locator("#gw-send").is_enabled()
    assert page.locator("#gw-error").is_hidden()

    transcript.add(3, "contact", "Is anyone there?")
    transcript.add(4, "bot", "Yes, here is your answer.")
    # A poll's interval on the page's clock, then a moment of real time for it: the next poll is due only once
    # the last one is answered, so on a loaded machine five rounds could move the clock past no poll at all.
    for _ in range(POLL_WAIT_MS // 200):
        page.clock.fast_forward(3_500)
        if page.locator("#gw-status").is_hidden():
            break
        page.wait_for_timeout(200)
    page.wait_for_selector("#gw-status", state="hidden", timeout=5_000)
    assert _bubbles(page) == ["Is anyone there?", "Yes, here is your answer."]
    assert page.errors == []


def test_widget_offers_retry_when_hung_request_never_stored_the_message(page, live_server):
    bodies: list[dict] = []
    hang = [True]

    def chat(route):
        bodies.append(json.loads(route.request.post_data or "{}"))
        if not hang[0]:
            route.continue_()  # otherwise never answered, and never stored

    page.clock.install()
    _fake_transcript(page)  # stays empty: the server never saw the message
    page.route("**/v1/bots/acme/chat", chat)
    _open(page, live_server)
    _ask(page, "How long is the password reset link valid?")
    page.wait_for_selector(".gw-msg--contact")
    page.clock.fast_forward(70_000)
    _idle(page, timeout=10_000)
    for _ in range(POLL_WAIT_MS // 200):  # two polls answered, however many rounds that takes (as above)
        page.clock.fast_forward(3_500)
        page.wait_for_timeout(200)
        if page.locator(".gw-msg--failed").count():
            break
    failed = page.locator(".gw-msg--contact.gw-msg--failed")
    assert "Not sent" in failed.inner_text()
    assert page.locator("#gw-status").is_hidden() and page.locator("#gw-typing").is_hidden()

    hang[0] = False
    page.unroute("**/v1/bots/acme/sessions/*/messages*")
    failed.get_by_role("button", name=re.compile("Retry")).click()
    assert _wait_bot_text(page).strip()
    assert page.locator(".gw-msg--contact").count() == 1 and page.locator(".gw-msg--failed").count() == 0
    assert len({b["message_id"] for b in bodies}) == 1
    assert page.errors == []


# ---- 8: two tabs on one session ----

def test_widget_places_messages_from_another_tab_by_id(page, live_server):
    transcript = _fake_transcript(page)
    done = {"reply": "Answer two.", "citations": [], "conversation_id": 1, "state": "bot", "message_id": 3}
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=_sse(("done", done))))
    _open(page, live_server)
    _ask(page, "Question two")
    _wait_bot_text(page)

    # Meanwhile the other tab asked first; the next poll brings both exchanges.
    transcript.add(1, "contact", "Question one")
    transcript.add(2, "bot", "Answer one.")
    transcript.add(3, "contact", "Question two")
    transcript.add(4, "bot", "Answer two.")
    page.wait_for_function("() => document.querySelectorAll('#gw-transcript .gw-msg').length === 4",
                           timeout=POLL_WAIT_MS)
    assert _bubbles(page) == ["Question one", "Answer one.", "Question two", "Answer two."]
    ids = page.locator("#gw-transcript .gw-msg").evaluate_all("lis => lis.map(li => li.dataset.id)")
    assert ids == ["1", "2", "3", "4"]
    assert page.errors == []


def test_widget_keeps_an_answer_out_of_another_bots_conversation(page, live_server):
    """The visitor picks another assistant while the first one's answer is on its way: its tokens and
    reply were drawn into the conversation now shown, the other bot's."""
    _two_bots(page)
    held = []
    page.route("**/v1/bots/acme/chat", lambda route: held.append(route))
    page.goto(live_server.url + "/?bot=acme")
    page.wait_for_selector("#gw-chat[data-ready='true']")
    _ask(page, "How do I sync?")
    while not held:
        page.wait_for_timeout(50)

    page.select_option("#gw-bot", "beta")
    page.wait_for_function("() => !document.querySelector('#gw-transcript .gw-msg')")
    done = {"reply": "Open Settings, then press Sync now.", "citations": [], "conversation_id": 1,
            "state": "bot", "message_id": 1}
    held[0].fulfill(status=200, headers={"content-type": "text/event-stream"},
                    body=_sse(("token", {"text": "Open Settings,"}), ("done", done)))
    _idle(page)
    assert _bubbles(page) == []
    assert page.locator("#gw-error").is_hidden()
    assert page.errors == []


def test_widget_lets_the_visitor_ask_another_bot_while_the_first_still_answers(page, live_server):
    """Send stayed disabled after picking another assistant until the first one's request ended; and
    that request's end re-enabled Send while the other bot's own answer was on its way."""
    _two_bots(page)
    page.add_init_script(FETCHES)
    held: dict[str, list] = {"acme": [], "beta": []}
    page.route("**/v1/bots/acme/chat", lambda route: held["acme"].append(route))
    page.route("**/v1/bots/beta/chat", lambda route: held["beta"].append(route))
    page.goto(live_server.url + "/?bot=acme")
    page.wait_for_selector("#gw-chat[data-ready='true']")
    _ask(page, "How do I sync?")
    page.wait_for_function("() => document.getElementById('gw-send').disabled")
    page.select_option("#gw-bot", "beta")
    page.wait_for_function("() => !document.getElementById('gw-send').disabled")
    _ask(page, "Do you ship abroad?")
    while not held["beta"]:
        page.wait_for_timeout(50)
    done = {"reply": "Open Settings.", "citations": [], "conversation_id": 1, "state": "bot", "message_id": 1}
    held["acme"][0].fulfill(status=200, headers={"content-type": "text/event-stream"}, body=_sse(("done", done)))
    wait_read(page, "/v1/bots/acme/chat$")  # acme's answer read and its request ended (300 ms was not always)
    assert page.locator("#gw-send").is_disabled()  # beta's answer is still on its way
    held["beta"][0].fulfill(status=200, headers={"content-type": "text/event-stream"}, body=_sse(
        ("done", {**done, "reply": "Yes, to 40 countries.", "message_id": 2})))
    _idle(page)
    assert _bubbles(page) == ["Do you ship abroad?", "Yes, to 40 countries."]
    assert page.errors == []


# ---- 9: a reload while the answer is being written ----

def test_widget_shows_typing_after_reload_while_answer_is_pending(page, live_server):
    transcript = _fake_transcript(page)
    transcript.add(5, "contact", "Still there?", status="pending")
    _open(page, live_server)
    assert page.locator("#gw-typing").is_visible()

    transcript.messages[0]["status"] = "done"
    transcript.add(6, "bot", "Here you go.")
    page.wait_for_selector("#gw-typing", state="hidden", timeout=POLL_WAIT_MS)
    assert _bubbles(page) == ["Still there?", "Here you go."]
    assert page.errors == []


# ---- 10: the limit comes from the server's 413, not from fields /v1/bots does not have ----

def test_widget_learns_message_limit_from_413_and_checks_it_before_sending(page, live_server):
    posts: list[str] = []

    def too_long(route):
        posts.append(route.request.post_data or "")
        route.fulfill(status=413, headers={"content-type": "application/json"},
                      body=json.dumps({"error": "text is 30 characters; the limit is 20", "limit": 20}))

    page.route("**/v1/bots/acme/chat", too_long)
    _open(page, live_server)
    _ask(page, "x" * 30)
    _idle(page)
    assert "limit is 20" in page.locator("#gw-error").inner_text()
    assert page.locator("#gw-input").input_value() == "x" * 30  # given back to edit
    assert page.locator(".gw-msg").count() == 0

    page.fill("#gw-input", "y" * 25)
    page.press("#gw-input", "Enter")
    assert "25 characters, and the limit is 20" in page.locator("#gw-error").inner_text()
    assert len(posts) == 1
    assert page.errors == []
