"""The console in a real headless Chromium: "Could not open escalation #N" stays until the operator picks
again or that escalation opens. A reload of the list (any live event) cleared it, so the operator, looking
away for a moment, saw an empty pane and no word of why."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.operators.conftest import CONSOLE_TOKEN, escalate, sign_in
from tests.web.page_fetches import FETCHES, wait_read

pytestmark = pytest.mark.browser
LISTING = re.compile(r".*/v1/escalations\?state=.*")


def _note(operator, live_url: str, escalation: int) -> None:
    """Another operator adds a note: a live event, which reads the list again."""
    operator.request.post(f"{live_url}/v1/escalations/{escalation}/notes", data={"text": "on it"},
                          headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"})


def test_console_keeps_a_picks_error_across_list_reloads_until_a_new_pick_or_it_opens(open_tab, live_url):
    shown = escalate(live_url, "console-pick-error-a", "Ada here, I want to talk to a human")
    broken = escalate(live_url, "console-pick-error-b", "Bo here, I want to talk to a human")
    operator = open_tab()
    operator.add_init_script(FETCHES)
    unreadable = re.compile(rf".*/v1/escalations/{broken}$")
    operator.route(unreadable, lambda route: route.abort("connectionfailed"))
    sign_in(operator, live_url)
    error = operator.locator("#op-list-error")

    operator.click(f".op-item[data-id='{broken}']")
    expect(error).to_contain_text(f"Could not open escalation #{broken}")
    with operator.expect_response(LISTING) as listed:  # the list is read again, and read well
        _note(operator, live_url, shown)
    assert listed.value.status == 200
    wait_read(operator, r"/v1/escalations\?state=")  # drawn (a fixed 300 ms was not always enough)
    expect(error).to_be_visible()
    expect(error).to_contain_text(f"Could not open escalation #{broken}")

    operator.click(f".op-item[data-id='{shown}']")  # a new pick: the old pick's error is gone
    expect(error).to_be_hidden()
    expect(operator.locator("#op-title")).to_contain_text(f"#{shown}")

    operator.click(f".op-item[data-id='{broken}']")
    expect(error).to_contain_text(f"Could not open escalation #{broken}")
    operator.unroute(unreadable)
    _note(operator, live_url, broken)  # a live event about it: it is read again, and opens now
    expect(operator.locator("#op-title")).to_contain_text(f"#{broken}")
    expect(operator.locator("#op-detail")).to_be_visible()
    expect(error).to_be_hidden()


def test_console_shows_a_picks_error_again_after_a_list_that_did_not_load_loads(open_tab, live_url):
    """The list's own error took the pick's place, and the next good reload cleared it: the pick's error was
    gone though nothing had opened, the empty pane again with no word of why."""
    shown = escalate(live_url, "console-pick-error-c", "Cy here, I want to talk to a human")
    broken = escalate(live_url, "console-pick-error-d", "Di here, I want to talk to a human")
    operator = open_tab()
    operator.route(re.compile(rf".*/v1/escalations/{broken}$"), lambda route: route.abort("connectionfailed"))
    sign_in(operator, live_url)
    error = operator.locator("#op-list-error")
    operator.click(f".op-item[data-id='{broken}']")
    expect(error).to_contain_text(f"Could not open escalation #{broken}")

    operator.route(LISTING, lambda route: route.abort("connectionfailed"))
    _note(operator, live_url, shown)  # a live event: the list is read again, and does not load
    expect(error).to_contain_text("Could not load the escalations")
    operator.unroute(LISTING)
    with operator.expect_response(LISTING) as listed:  # the next one loads
        _note(operator, live_url, shown)
    assert listed.value.status == 200
    expect(error).to_contain_text(f"Could not open escalation #{broken}")
    expect(error).to_be_visible()
