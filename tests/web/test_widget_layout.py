"""The widget's look and input in a real Chromium: contrast in both colour schemes, a narrow screen,
and text that only looks like something (zero-width characters)."""

from __future__ import annotations

import pytest

from tests.web.test_widget_browser import _open

pytestmark = pytest.mark.browser


# The input border against the chat background, as WCAG computes contrast.
CONTRAST = """() => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => v / 255)
    .map(c => c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)
    .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  const input = getComputedStyle(document.getElementById('gw-input'));
  const back = getComputedStyle(document.getElementById('gw-chat'));
  const [a, b] = [lum(rgb(input.borderTopColor)), lum(rgb(back.backgroundColor))].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_widget_input_border_contrast_is_at_least_3_to_1(browser, live_server, scheme):
    context = browser.new_context(color_scheme=scheme)
    try:
        tab = context.new_page()
        _open(tab, live_server)
        assert tab.evaluate(CONTRAST) >= 3.0
    finally:
        context.close()


def test_widget_send_button_stays_right_on_a_narrow_screen(browser, live_server):
    context = browser.new_context(viewport={"width": 375, "height": 700})
    try:
        tab = context.new_page()
        _open(tab, live_server)
        send = tab.locator("#gw-send").bounding_box()
        field = tab.locator("#gw-input").bounding_box()
        assert abs((send["x"] + send["width"]) - (field["x"] + field["width"])) <= 2, (send, field)
    finally:
        context.close()


def test_widget_treats_zero_width_only_text_as_blank(page, live_server):
    sent = []
    page.on("request", lambda request: sent.append(request.url) if request.method == "POST" else None)
    _open(page, live_server)
    for blank in ("\u200b", "\u200b\u200b \ufeff", "\u2060\u200d"):
        page.fill("#gw-input", blank)
        page.press("#gw-input", "Enter")
        assert "type a message" in page.locator("#gw-error").inner_text()
    assert page.locator(".gw-msg").count() == 0
    assert sent == []
