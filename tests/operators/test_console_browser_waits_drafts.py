"""The console across time: how long a released escalation's customer has waited, and reply drafts that
outlive a reload of the page."""

from __future__ import annotations

import json
import sqlite3

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import CONSOLE_TOKEN, escalate, sign_in

pytestmark = pytest.mark.browser


def test_console_counts_a_released_escalations_wait_from_its_release(open_tab, live_url, console_root):
    """"waiting N min" counted from the escalation's opening: one claimed two hours ago and released just now
    showed "waiting 2 h 00 min" and jumped to the top of the list, above a customer who had truly waited."""
    released = escalate(live_url, "console-released", "Released here, I want to talk to a human")
    other = escalate(live_url, "console-released-other", "Other here, I want to talk to a human")
    with sqlite3.connect(console_root / "gateway.db") as db:  # opened two hours ago, the other one hour ago
        db.execute("UPDATE escalations SET created_at = datetime(created_at, '-2 hours') WHERE id = ?", (released,))
        db.execute("UPDATE escalations SET created_at = datetime(created_at, '-1 hours') WHERE id = ?", (other,))
    operator = open_tab()
    token = {"Authorization": f"Bearer {CONSOLE_TOKEN}"}
    for action in ("claim", "release"):
        assert operator.request.post(f"{live_url}/v1/escalations/{released}/{action}", headers=token).status == 200
    sign_in(operator, live_url)
    wait = operator.locator(f".op-item[data-id='{released}'] .op-wait")
    expect(wait).to_have_text("waiting <1 min")
    assert wait.get_attribute("title").startswith("released ") and "escalated" in wait.get_attribute("title")
    expect(operator.locator(f".op-item[data-id='{other}'] .op-wait")).to_have_text("waiting 1 h 00 min")
    shown = operator.locator(".op-item").evaluate_all("items => items.map(b => Number(b.dataset.id))")
    assert shown.index(other) < shown.index(released)


def test_console_keeps_a_reply_draft_across_a_reload_until_it_is_sent(open_tab, live_url):
    """Drafts lived in the page's memory: a reload (or a tab the browser discarded) lost the reply the
    operator was writing. Each escalation's is kept in the tab's storage, and forgotten once it is sent."""
    anna = escalate(live_url, "console-kept-a", "Anna kept, I want to talk to a human")
    ben = escalate(live_url, "console-kept-b", "Ben kept, I want to talk to a human")
    operator = open_tab()
    sign_in(operator, live_url)
    for escalation, draft in ((anna, "Anna, your refund is on its way."), (ben, "Ben, one moment please.")):
        operator.click(f".op-item[data-id='{escalation}']")
        expect(operator.locator("#op-title")).to_contain_text(f"#{escalation}")
        operator.fill("#op-reply", draft)

    operator.reload()  # signed in still (the token is the tab's), nothing open
    operator.wait_for_selector("#op-live:not([hidden])")
    operator.click(f".op-item[data-id='{anna}']")
    expect(operator.locator("#op-title")).to_contain_text(f"#{anna}")
    expect(operator.locator("#op-reply")).to_have_value("Anna, your refund is on its way.")
    with operator.expect_response(lambda r: r.url.endswith(f"/{anna}/reply")) as answered:
        operator.press("#op-reply", "Enter")
    assert answered.value.status == 201
    expect(operator.locator("#op-reply")).to_have_value("")

    operator.reload()
    operator.wait_for_selector("#op-live:not([hidden])")
    operator.click(f".op-item[data-id='{anna}']")
    expect(operator.locator("#op-title")).to_contain_text(f"#{anna}")
    expect(operator.locator("#op-reply")).to_have_value("")  # sent: not offered again
    operator.click(f".op-item[data-id='{ben}']")
    expect(operator.locator("#op-title")).to_contain_text(f"#{ben}")
    expect(operator.locator("#op-reply")).to_have_value("Ben, one moment please.")

    operator.once("dialog", lambda dialog: dialog.accept())  # the claims held are released
    operator.click("#op-signout")  # the next operator at this screen reads none of them
    expect(operator.locator("#op-login")).to_be_visible()  # once the claims held are released
    kept = operator.evaluate("() => Object.keys(localStorage).concat(Object.keys(sessionStorage))"
                             ".filter(k => k.startsWith('gw-operator-draft:'))")
    assert kept == []


def test_console_tells_the_holder_of_a_stale_claim_that_the_wait_is_for_their_reply(open_tab, live_url):
    """The stale-claim ping read "the customer has waited 16 min for sam's reply" on sam's own console, as if
    about a colleague; it says "your reply" to the holder, and names the holder to everyone else."""
    mine = escalate(live_url, "console-stale-mine", "Stale mine, I want to talk to a human")
    operator = open_tab()
    pings = [{"escalation_id": mine, "operator": "sam"}]

    def one_ping_a_stream(route):  # a stream brings the next ping and ends; none left, the server is away
        if not pings:
            return route.abort("connectionrefused")
        ping = pings.pop(0)
        event = json.dumps({"type": "stale_claim", "bot": "acme", "conversation_id": 1, "waiting_minutes": 16, **ping})
        route.fulfill(status=200, content_type="text/event-stream",
                      body=f"event: ready\ndata: {{}}\n\nevent: stale_claim\ndata: {event}\n\n")

    operator.route("**/v1/escalations/stream", one_ping_a_stream)
    operator.goto(live_url + "/operator")  # signed in without waiting for a live stream: none stays up
    operator.fill("#op-token", CONSOLE_TOKEN)
    operator.press("#op-token", "Enter")
    expect(operator.locator("#op-notice")).to_have_text(
        f"Escalation #{mine}: the customer has waited 16 min for your reply.")
    pings.append({"escalation_id": mine, "operator": "kim"})
    expect(operator.locator("#op-notice")).to_have_text(  # the console's next stream: a colleague's claim
        f"Escalation #{mine}: the customer has waited 16 min for kim's reply.", timeout=10_000)


def test_a_draft_does_not_outlive_the_tab_it_was_written_in(open_tab, live_url):
    """Kept in localStorage, a draft outlived its sign-in: the token is the tab's (sessionStorage), so an
    operator who closed the tab on a shared computer, as people leave, rather than pressing Sign out, left
    their half-written replies to customers on it for whoever opened the console next."""
    carla = escalate(live_url, "console-tab-closed", "Carla here, I want to talk to a human")
    operator = open_tab()
    sign_in(operator, live_url)
    operator.click(f".op-item[data-id='{carla}']")
    expect(operator.locator("#op-title")).to_contain_text(f"#{carla}")
    operator.fill("#op-reply", "Carla, your card ending 4242 was refunded.")
    operator.reload()  # the tab's own reload keeps it
    operator.wait_for_selector("#op-live:not([hidden])")
    operator.click(f".op-item[data-id='{carla}']")
    expect(operator.locator("#op-reply")).to_have_value("Carla, your card ending 4242 was refunded.")

    operator.close()  # no sign-out: the next person at this screen opens the console
    following = operator.context.new_page()
    following.goto(live_url + "/operator")
    kept = following.evaluate("() => Object.keys(localStorage).concat(Object.keys(sessionStorage))"
                              ".filter(k => k.startsWith('gw-operator-draft:'))")
    assert kept == []


def test_a_draft_an_earlier_version_kept_in_local_storage_is_forgotten(open_tab, live_url):
    """Drafts were kept in localStorage until the tab's storage took over, and nothing read or removed those
    afterwards (Sign out clears the tab's): a half-written reply left on a shared computer before the upgrade
    stayed there for good. The console removes them as it loads."""
    operator = open_tab()
    operator.goto(live_url + "/operator")
    operator.evaluate("() => { localStorage.setItem('gw-operator-draft:sam:7', 'Dana, your card ending 1111…');"
                      " localStorage.setItem('gw-operator-draft:kim:8', 'Eli, refunded.');"
                      " localStorage.setItem('other-key', 'kept'); }")
    operator.reload()
    operator.wait_for_selector("#op-token")
    left = operator.evaluate("() => Object.keys(localStorage).sort()")
    assert left == ["other-key"]


@pytest.mark.parametrize(("told", "words"), [(True, "was told everyone is busy."), (False, "was not told.")])
def test_console_tells_the_operators_an_escalation_went_unclaimed(open_tab, live_url, told, words):
    """The unclaimed reminder only redrew the list: the console said nothing of the customer who had waited
    past the claim timeout, which the README calls pinging the operators again."""
    waiting = escalate(live_url, f"console-unclaimed-{told}", "Unclaimed, I want to talk to a human")
    operator = open_tab()
    event = json.dumps({"type": "reminder", "bot": "acme", "escalation_id": waiting, "conversation_id": 1,
                        "waiting_minutes": 15, "customer_told": told})
    operator.route("**/v1/escalations/stream", lambda route: route.fulfill(
        status=200, content_type="text/event-stream", body=f"event: ready\ndata: {{}}\n\nevent: reminder\ndata: {event}\n\n"))
    operator.goto(live_url + "/operator")  # signed in without waiting for a live stream: none stays up
    operator.fill("#op-token", CONSOLE_TOKEN)
    operator.press("#op-token", "Enter")
    expect(operator.locator("#op-notice")).to_have_text(
        f"Escalation #{waiting} has waited 15 min and nobody has claimed it; the customer {words}")
