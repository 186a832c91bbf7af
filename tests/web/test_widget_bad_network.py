"""The widget on a bad network, in a real headless Chromium against the real app: a transcript read that hangs,
a 429 that asks to wait, going offline and back, a retry the server keeps but refuses to wait on, a double click.

Playwright's routing stands in for the transcript or chat endpoint where a test needs an answer the offline
bot cannot give; the page's clock is driven where a test needs minutes to pass.
"""

from __future__ import annotations

import json
from email.utils import formatdate

import pytest

from tests.web.page_fetches import FETCHES, asked, wait_read
from tests.web.test_widget_browser import _ask, _open
from tests.web.test_widget_resilience import POLL_WAIT_MS, FakeTranscript, _bubbles, _idle

pytestmark = pytest.mark.browser

TRANSCRIPT = r"/v1/bots/acme/sessions/[^/]+/messages"


class FlakyTranscript(FakeTranscript):
    """A FakeTranscript that can leave a read unanswered (`hang`) or refuse it (`refuse`: a status and headers)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.offline = False  # the read fails as with no network (Playwright's routes answer even when offline)
        self.refuse: tuple[int, dict] | None = None
        self.reads = 0

    def handle(self, route) -> None:
        self.reads += 1
        if self.hang:
            return  # never answered: a half-open connection
        if self.offline:
            route.abort("internetdisconnected")
            return
        if self.refuse is not None:
            status, headers = self.refuse
            route.fulfill(status=status, headers={"content-type": "application/json", **headers},
                          body=json.dumps({"error": "this conversation was read too often in the last minute"}))
            return
        super().handle(route)


def _flaky(page) -> FlakyTranscript:
    fake = FlakyTranscript()
    page.route("**/v1/bots/acme/sessions/*/messages*", fake.handle)
    return fake


def _tick(page, ms: int, times: int) -> None:
    """Move the page's clock on by `ms`, `times` times, with a moment of real time after each for its fetches."""
    for _ in range(times):
        page.clock.fast_forward(ms)
        page.wait_for_timeout(200)


def test_a_transcript_read_that_hangs_does_not_stop_the_polling(page, live_server):
    page.clock.install()
    transcript = _flaky(page)
    _open(page, live_server)
    transcript.hang = True
    before = transcript.reads
    _tick(page, 3_500, 1)
    assert transcript.reads == before + 1  # that read is out, and never answered

    transcript.hang = False
    transcript.add(7, "operator", "Hi, Sam here. How can I help?")
    for _ in range(POLL_WAIT_MS // 200):  # past the read's timeout, then a poll or two
        _tick(page, 3_500, 1)
        if page.locator(".gw-msg--operator").count():
            break
    assert _bubbles(page) == ["Hi, Sam here. How can I help?"]
    assert page.errors == []


def test_a_429_on_the_transcript_is_waited_out_as_its_retry_after_asks(page, live_server):
    page.clock.install()
    transcript = _flaky(page)
    _open(page, live_server)
    transcript.refuse = (429, {"retry-after": "30"})
    before = transcript.reads
    _tick(page, 3_500, 1)
    assert transcript.reads == before + 1
    transcript.refuse = None
    _tick(page, 3_500, 6)  # 21 s: seven reads at the usual pace
    assert transcript.reads == before + 1
    transcript.add(3, "operator", "Back with you now.")
    for _ in range(POLL_WAIT_MS // 200):
        _tick(page, 3_500, 1)
        if page.locator(".gw-msg--operator").count():
            break
    assert _bubbles(page) == ["Back with you now."]
    assert page.errors == []


def test_offline_reads_back_off_and_the_transcript_is_read_at_once_when_back_online(page, live_server):
    page.add_init_script(FETCHES)
    page.clock.install()
    transcript = _flaky(page)
    _open(page, live_server)
    wait_read(page, TRANSCRIPT)
    before = asked(page, TRANSCRIPT)
    page.context.set_offline(True)
    transcript.offline = True
    _tick(page, 1_000, 30)  # 30 s offline: ten reads at the usual pace
    offline_reads = asked(page, TRANSCRIPT) - before
    assert 2 <= offline_reads <= 4, offline_reads  # at 3, 9 and 21 s, then 45 s

    transcript.add(9, "operator", "Are you still there?")
    transcript.offline = False
    page.context.set_offline(False)
    # No clock moved: only the `online` event can bring the read that shows it, before the 45 s read.
    page.wait_for_selector(".gw-msg--operator", timeout=5_000)
    assert _bubbles(page) == ["Are you still there?"]
    assert page.errors == []


def test_a_retry_refused_with_stored_follows_the_transcript_and_keeps_the_message(page, live_server):
    transcript = _flaky(page)
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=429, headers={"content-type": "application/json", "retry-after": "20"},
        body=json.dumps({"error": "this conversation was read too often in the last minute; try again in 20 s",
                         "stored": True})))
    _open(page, live_server)
    _ask(page, "Is my refund on its way?")
    _idle(page)
    assert _bubbles(page) == ["Is my refund on its way?"]  # kept: the server has it
    assert page.locator("#gw-input").input_value() == ""
    assert page.locator("#gw-error").is_hidden()
    assert "longer than usual" in page.locator("#gw-status").inner_text()

    transcript.add(3, "contact", "Is my refund on its way?")
    transcript.add(4, "bot", "Yes: refunds reach your card in 5 to 10 days.")
    page.wait_for_selector("#gw-status", state="hidden", timeout=POLL_WAIT_MS)
    assert _bubbles(page) == ["Is my refund on its way?", "Yes: refunds reach your card in 5 to 10 days."]
    assert page.errors == []


def test_a_double_click_on_send_sends_once(page, live_server):
    page.add_init_script(FETCHES)
    _open(page, live_server)
    page.fill("#gw-input", "How long is the password reset link valid?")
    page.dblclick("#gw-send")
    _idle(page)
    assert asked(page, r"/v1/bots/acme/chat", "POST") == 1
    assert page.locator(".gw-msg--contact").count() == 1
    assert page.errors == []


def test_a_503_whose_retry_after_is_an_http_date_is_waited_out_until_then(page, live_server):
    # RFC 9110 lets Retry-After be a date as well as seconds; a proxy or load balancer in front sends one.
    page.clock.install()
    transcript = _flaky(page)
    _open(page, live_server)
    now_s = page.evaluate("Date.now()") / 1000
    transcript.refuse = (503, {"retry-after": formatdate(now_s + 30, usegmt=True)})
    before = transcript.reads
    _tick(page, 3_500, 1)
    assert transcript.reads == before + 1
    transcript.refuse = None
    _tick(page, 3_500, 6)  # 21 s: failed reads backing off would have come at 3, 6 and 12 s after
    assert transcript.reads == before + 1
    transcript.add(3, "operator", "Back with you now.")
    for _ in range(POLL_WAIT_MS // 200):
        _tick(page, 3_500, 1)
        if page.locator(".gw-msg--operator").count():
            break
    assert _bubbles(page) == ["Back with you now."]
    assert page.errors == []


def test_back_online_a_read_left_hanging_by_the_network_change_is_given_up_and_the_transcript_read_at_once(
        page, live_server):
    page.clock.install()
    transcript = _flaky(page)
    _open(page, live_server)
    transcript.hang = True  # the read goes out on the old network's connection, and nothing answers it
    before = transcript.reads
    _tick(page, 3_500, 1)
    assert transcript.reads == before + 1

    transcript.hang = False
    transcript.add(5, "operator", "Sorry for the wait, I'm here now.")
    page.evaluate("window.dispatchEvent(new Event('online'))")
    # No clock moved: the read that hangs is not waited out for its 10 s, the transcript is read now.
    page.wait_for_selector(".gw-msg--operator", timeout=5_000)
    assert _bubbles(page) == ["Sorry for the wait, I'm here now."]
    assert page.errors == []
