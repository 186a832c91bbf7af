"""The operator console in a real headless Chromium, against the real app on a real port.

An operator opens /operator, sees a new escalation appear live (SSE), claims it and replies; the
customer's web chat (a second browser tab) shows the reply; the operator resolves; the bot answers
the customer's next question from the knowledge base.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.operators.conftest import CONSOLE_TOKEN, WAIT_MS, escalate, open_escalation, open_listed, sign_in
from tests.web.conftest import ask_in_chat
from tests.web.page_fetches import FETCHES, wait_read

pytestmark = pytest.mark.browser


def test_console_claim_reply_resolve_round_trip(open_tab, live_url):
    operator, customer = open_tab(), open_tab()
    errors: list[str] = []
    for tab in (operator, customer):
        tab.on("pageerror", lambda exc: errors.append(str(exc)))

    operator.goto(live_url + "/operator")
    # Signed out, only the sign-in form shows (a `display` rule once overrode `hidden`, showing both).
    assert operator.locator("#op-login").is_visible() and operator.locator("#op-main").is_hidden()
    operator.fill("#op-token", "wrong-token")
    operator.press("#op-token", "Enter")
    operator.wait_for_selector("#op-login-error:not([hidden])")
    operator.fill("#op-token", CONSOLE_TOKEN)
    operator.press("#op-token", "Enter")
    operator.wait_for_selector("body[data-ready='true']")
    operator.wait_for_selector("#op-live:not([hidden])", timeout=WAIT_MS)
    assert operator.locator("#op-login").is_hidden() and operator.locator("#op-main").is_visible()
    assert operator.locator(".op-item").count() == 0

    ask_in_chat(customer, live_url + "/", "I want to talk to a human <img src=x onerror=alert(1)>")

    # It appears in the console without a reload (server-sent events).
    open_listed(operator, "talk to a human <img")
    assert "<img" in operator.locator("#op-transcript .op-msg--contact .op-text").first.inner_text()
    # Each message says when it was written (the console's own format for the API's UTC times).
    assert re.fullmatch(r"Customer · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
                        operator.locator("#op-transcript .op-msg--contact .op-author").first.inner_text())
    assert operator.locator("#op-transcript img").count() == 0
    assert "Asked first" in operator.locator("#op-summary").inner_text()

    assert operator.locator("#op-who").inner_text() == "signed in as sam"
    operator.click("#op-claim")
    operator.wait_for_function("() => document.getElementById('op-title').textContent.includes('claimed')")
    assert operator.locator("#op-takeover").is_hidden()  # it is sam's own claim
    # Release hands the claim back (open again); claiming again takes it back.
    operator.click("#op-release")
    operator.wait_for_function("() => document.getElementById('op-title').textContent.includes('open')")
    assert operator.locator("#op-release").is_hidden()
    operator.wait_for_function("() => [...document.querySelectorAll('#op-events li')].some(li => "
                               "li.textContent.includes('released'))")
    first_event = operator.locator("#op-events li").first.inner_text()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · ", first_event), first_event
    operator.click("#op-claim")
    operator.wait_for_function("() => document.getElementById('op-title').textContent.includes('claimed')")
    operator.fill("#op-reply", "Hi, Sam from support here. How can I help?")
    operator.click("#op-reply-form button[type=submit]")
    customer.wait_for_selector(".gw-msg--operator", timeout=WAIT_MS)
    assert "Sam from support" in customer.locator(".gw-msg--operator .gw-bubble").inner_text()

    operator.click("#op-resolve")
    operator.wait_for_function("() => document.getElementById('op-title').textContent.includes('resolved')")
    customer.wait_for_function(
        "() => [...document.querySelectorAll('.gw-bubble')].some(b => b.textContent.includes('back to the assistant'))",
        timeout=WAIT_MS)
    bot_count = customer.locator(".gw-msg--bot").count()
    customer.fill("#gw-input", "How do I reset my password?")
    customer.press("#gw-input", "Enter")
    customer.wait_for_function(
        f"""() => document.getElementById('gw-form').getAttribute('aria-busy') === 'false'
                 && document.querySelectorAll('.gw-msg--bot').length > {bot_count}""", timeout=WAIT_MS)
    answer = customer.locator(".gw-msg--bot .gw-bubble").last.inner_text().lower()
    assert "password" in answer
    assert errors == []


def test_console_reply_resent_after_a_dropped_connection_keeps_its_message_id(open_tab, live_url):
    """The reply reaches the server, which stores and sends it, but the connection drops before the answer:
    the console says the outcome is unknown, and sending again reuses the message_id, so it is stored once."""
    operator, customer = open_tab(), open_tab()
    errors: list[str] = []
    for tab in (operator, customer):
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
    sent: list[tuple[str, dict]] = []  # (url, body) of every reply the console sent

    def drop_the_first_answer(route):
        sent.append((route.request.url, json.loads(route.request.post_data)))
        if len(sent) == 1:
            route.fetch()  # the server stores the reply and sends it to the customer…
            route.abort("connectionreset")  # …and the console never hears back
        else:
            route.continue_()

    operator.route("**/v1/escalations/*/reply", drop_the_first_answer)
    sign_in(operator, live_url)
    ask_in_chat(customer, live_url + "/", "Can I talk to a human about my parcel?")
    open_listed(operator, "about my parcel")

    text = "Your parcel left the warehouse this morning."
    operator.fill("#op-reply", text)
    operator.click("#op-reply-form button[type=submit]")
    operator.wait_for_selector("#op-reply-form[data-state='unknown']", timeout=WAIT_MS)
    assert "may or may not have reached the customer" in operator.locator("#op-reply-state").inner_text()
    assert operator.locator("#op-reply").input_value() == text  # kept, to be sent again

    with operator.expect_response(lambda r: r.url.endswith("/reply")) as answered:
        operator.click("#op-reply-form button[type=submit]")
    assert answered.value.status == 200  # the reply stored the first time, not a new one
    operator.wait_for_selector("#op-reply-form[data-state='idle']")
    assert operator.locator("#op-reply-state").is_hidden() and operator.locator("#op-reply").input_value() == ""
    (url, first), (_, again) = sent
    assert first["message_id"].startswith("op-") and again == first

    escalation = url.rsplit("/", 2)[-2]
    detail = operator.request.get(f"{live_url}/v1/escalations/{escalation}",
                                  headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"}).json()
    assert [m["text"] for m in detail["messages"] if m["author"] == "operator"] == [text]
    customer.wait_for_selector(".gw-msg--operator", timeout=WAIT_MS)

    # The next reply is a new message: a new message_id.
    operator.fill("#op-reply", "Anything else I can help with?")
    with operator.expect_response(lambda r: r.url.endswith("/reply")) as answered:
        operator.click("#op-reply-form button[type=submit]")
    assert answered.value.status == 201
    assert sent[2][1]["message_id"] not in (first["message_id"], None)

    operator.click("#op-resolve")
    operator.wait_for_function("() => document.getElementById('op-title').textContent.includes('resolved')")
    assert errors == []


def test_console_shows_an_escalation_opened_before_its_live_stream_connected(open_tab, live_url):
    """The list is read at sign-in and the stream connects after: an escalation opened in between sent
    its event to nobody and stayed out of the list (seen in a full run under load). The stream request
    is held here until that escalation exists."""
    import urllib.request

    operator = open_tab()

    def escalate_first(route):
        body = json.dumps({"session_id": "console-gap", "text": "I want to talk to a human"}).encode()
        request = urllib.request.Request(live_url + "/v1/bots/acme/chat", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=60).read()
        route.continue_()

    operator.route("**/v1/escalations/stream", escalate_first)
    sign_in(operator, live_url)
    operator.wait_for_selector(".op-item", timeout=WAIT_MS)
    assert operator.locator(".op-item").count() >= 1


def test_console_fits_a_phone_screen(open_tab, live_url):
    """Under 48rem the list and the escalation stack: side by side they overflowed a 400 px screen,
    the escalation squeezed into a column a few words wide."""
    escalation = escalate(live_url, "console-phone", "Phone here, I want to talk to a human")  # its own
    operator = open_tab(viewport={"width": 400, "height": 800})
    open_escalation(operator, live_url, escalation)
    assert operator.evaluate("document.documentElement.scrollWidth") <= 400
    detail, items = operator.locator("#op-detail").bounding_box(), operator.locator(".op-item").first.bounding_box()
    assert detail["width"] > 300 and detail["y"] > items["y"]  # full width, below the list
    assert operator.evaluate("window.scrollY") > 0  # scrolled to the escalation just picked


def test_console_keeps_the_picked_escalation_when_an_earlier_pick_answers_late(open_tab, live_url):
    """Picking A, then B before A's transcript came: A's late answer was drawn over B's, while Claim and
    Send reply still acted on B, so an operator reading A's customer answered B's."""
    first = escalate(live_url, "console-late-a", "Alpha here, I want to talk to a human")
    second = escalate(live_url, "console-late-b", "Bravo here, I want to talk to a human")
    operator = open_tab()
    operator.add_init_script(FETCHES)
    held = []
    operator.route(re.compile(rf".*/v1/escalations/{first}$"), lambda route: held.append(route))
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{first}']")
    operator.click(f".op-item[data-id='{second}']")
    operator.wait_for_function(f"() => document.getElementById('op-title').textContent.includes('#{second}')")
    with operator.expect_response(re.compile(rf".*/v1/escalations/{first}$")):
        held[0].continue_()
    wait_read(operator, rf"/v1/escalations/{first}$")  # the late answer is read (a fixed 300 ms was not always)
    assert f"#{second}" in operator.locator("#op-title").inner_text()
    assert "Bravo" in operator.locator("#op-transcript").inner_text()
    assert "Alpha" not in operator.locator("#op-transcript").inner_text()


def test_console_keeps_earlier_pages_open_when_a_live_event_refreshes_the_transcript(open_tab, live_url):
    """An operator reading earlier messages ("Show earlier messages") lost them, and their place, whenever
    the escalation changed (a note, the customer writing): the refresh drew the newest page alone."""
    escalation = escalate(live_url, "console-pages", "Page one here, I want to talk to a human")
    operator = open_tab()
    operator.request.post(f"{live_url}/v1/bots/acme/chat", data={"session_id": "console-pages", "text": "Still here"})

    def small_pages(route):  # two messages a page, so paging needs no long conversation
        url = route.request.url
        route.continue_(url=url + ("&" if "?" in url else "?") + "limit=2")

    operator.route(re.compile(rf".*/v1/escalations/{escalation}(\?.*)?$"), small_pages)
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{escalation}']")
    operator.wait_for_selector("#op-older:not([hidden])")
    operator.wait_for_function("() => document.querySelectorAll('#op-transcript > li').length === 2")
    operator.click("#op-older")
    operator.wait_for_function("() => document.querySelectorAll('#op-transcript > li').length > 2")
    shown = operator.locator("#op-transcript > li").count()
    assert "Page one here" in operator.locator("#op-transcript").inner_text()

    operator.request.post(f"{live_url}/v1/escalations/{escalation}/notes", data={"text": "checking the order"},
                          headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})
    operator.wait_for_function("() => document.getElementById('op-notes').textContent.includes('checking')")
    assert operator.locator("#op-transcript > li").count() == shown
    assert "Page one here" in operator.locator("#op-transcript").inner_text()


def test_console_says_when_the_list_cannot_be_loaded_instead_of_keeping_the_old_one(open_tab, live_url):
    """Changing the filter while the server was unreachable kept the previous filter's escalations under
    the new name, and said nothing: the only error line sits in the detail pane, hidden with nothing picked."""
    escalation = escalate(live_url, "console-list-down", "List check here, I want to talk to a human")
    operator = open_tab()
    sign_in(operator, live_url)
    operator.wait_for_selector(f".op-item[data-id='{escalation}']")
    listing = re.compile(r".*/v1/escalations\?state=.*")
    operator.route(listing, lambda route: route.abort("connectionfailed"))
    operator.select_option("#op-filter", "resolved")
    operator.wait_for_selector("#op-list-error:not([hidden])")
    assert "Could not load the escalations" in operator.locator("#op-list-error").inner_text()
    assert operator.locator(".op-item").count() == 0
    operator.unroute(listing)
    operator.select_option("#op-filter", "open")
    operator.wait_for_selector(f".op-item[data-id='{escalation}']")
    assert operator.locator("#op-list-error").is_hidden()


def test_console_shows_a_telegram_deep_links_start_payload_as_text(open_tab, live_url):
    """The API gives a `/start order123` message its `start_payload`; the console showed only the message's
    empty text, so the operator never saw where the customer came from."""
    escalation = escalate(live_url, "console-start", "Deep link here, I want to talk to a human")
    operator = open_tab()

    def came_from_a_link(route):  # the console's side only: tests/operators/test_api.py has the API's
        body = route.fetch().json()
        first = body["messages"][0]
        body["messages"][0] = {**first, "text": "", "start_payload": "<b>order123</b>"}
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    operator.route(re.compile(rf".*/v1/escalations/{escalation}$"), came_from_a_link)
    sign_in(operator, live_url)
    operator.locator(".op-item", has_text="Deep link here").click()
    shown = operator.wait_for_selector("#op-transcript .op-msg--contact .op-start")
    assert shown.inner_text() == "Opened from a link with start=<b>order123</b>"
    assert operator.locator("#op-transcript .op-start b").count() == 0


def test_console_on_a_phone_scrolls_to_the_escalation_a_live_event_drew_first(open_tab, live_url):
    """On a phone the picked escalation is brought into view below the list. A live event about it while it
    was being read started a newer reading, the pick's own was then not drawn, and the pick scrolled to the
    pane still hidden: the newer reading drew the escalation out of view, and the operator saw no change."""
    escalation = escalate(live_url, "console-phone-event", "Phone event here, I want to talk to a human")
    operator = open_tab(viewport={"width": 400, "height": 800})
    operator.add_init_script(FETCHES)
    readings = []
    # The first two held (a third, of the stream's `ready` read late, goes on: it is then the newest).
    operator.route(re.compile(rf".*/v1/escalations/{escalation}$"),
                   lambda route: readings.append(route) if len(readings) < 2 else route.continue_())
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{escalation}']")
    operator.request.post(f"{live_url}/v1/escalations/{escalation}/notes", data={"text": "on it"},
                          headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})
    for _ in range(WAIT_MS // 50):  # the pick's reading, and the one its live event asked for
        if len(readings) == 2:
            break
        operator.wait_for_timeout(50)
    with operator.expect_response(lambda r: r.request == readings[0].request):
        readings[0].continue_()  # the pick's: no longer the newest, not drawn
    # For the page to read it first (later, the pick scrolled to a pane drawn).
    wait_read(operator, rf"/v1/escalations/{escalation}$", first=1)
    readings[1].continue_()
    operator.wait_for_function(f"() => document.getElementById('op-title').textContent.includes('#{escalation}')")
    assert operator.evaluate("window.scrollY") > 0  # drawn and brought into view in one step
