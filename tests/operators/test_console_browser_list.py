"""The console's escalation list in a real headless Chromium, while live events redraw it.

The list is drawn again on every live event (a note, a customer writing, another operator claiming). An
operator's tap or click spans a press and a release; when the list was drawn again in between, the
button pressed was gone from the page and the browser sent no click, so the escalation never opened.
"""

from __future__ import annotations

import re

import pytest

from tests.operators.test_console_browser import TOKEN, _escalate, live_url, open_tab, sign_in  # noqa: F401
from tests.web.conftest import browser, chromium_path  # noqa: F401

pytestmark = pytest.mark.browser
LISTING = re.compile(r".*/v1/escalations\?state=.*")


def test_console_opens_the_escalation_tapped_while_a_live_event_redraws_the_list(open_tab, live_url):  # noqa: F811
    escalation = _escalate(live_url, "console-tap", "Tap here, I want to talk to a human")
    operator = open_tab(viewport={"width": 400, "height": 800})
    sign_in(operator, live_url)
    box = operator.locator(f".op-item[data-id='{escalation}']").bounding_box()
    operator.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    operator.mouse.down()
    with operator.expect_response(LISTING):  # a live event: another operator adds a note
        operator.request.post(f"{live_url}/v1/escalations/{escalation}/notes", data={"text": "on it"},
                              headers={"Authorization": f"Bearer {TOKEN}"})
    operator.wait_for_timeout(300)  # the list is drawn again by now
    operator.mouse.up()
    operator.wait_for_selector("#op-transcript .op-msg", timeout=10_000)
    assert f"#{escalation}" in operator.locator("#op-title").inner_text()
