"""The widget's look and input in a real Chromium: contrast in both colour schemes, a narrow screen,
text that only looks like something (zero-width characters), and right-to-left text."""

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


RTL = """() => {
  const ask = window.GatewayWidget.appendMessage({id: 1, direction: 'in', author: 'contact', text: 'كيف أغير كلمة المرور?'});
  const reply = window.GatewayWidget.appendMessage({id: 2, direction: 'out', author: 'bot',
    text: 'افتح الإعدادات [1].\\n\\n1. اختر الحساب\\n2. اختر كلمة المرور', citations: []});
  const english = window.GatewayWidget.appendMessage({id: 3, direction: 'out', author: 'bot', text: 'Open Settings.'});
  const bubble = li => li.querySelector('.gw-bubble');
  const item = bubble(reply).querySelector('ol > li').getBoundingClientRect();
  const box = bubble(reply).getBoundingClientRect();
  const input = document.getElementById('gw-input');
  input.value = 'سؤال آخر?';
  return {ask: bubble(ask).matches(':dir(rtl)'), reply: bubble(reply).matches(':dir(rtl)'),
          english: bubble(english).matches(':dir(ltr)'), input: input.matches(':dir(rtl)'),
          // the list's numbers sit on the right, with room for them inside the bubble
          room: box.right - item.right};
}"""


def test_widget_shows_arabic_right_to_left(page, live_server):
    """The page is left to right, and so was every bubble: an Arabic question's "?" and a reply's list
    numbers showed on the wrong side."""
    _open(page, live_server)
    shown = page.evaluate(RTL)
    assert shown["ask"] and shown["reply"] and shown["english"] and shown["input"], shown
    assert shown["room"] > 25, shown
    page.goto(live_server.url + "/operator")
    assert page.evaluate("""() => { const box = document.getElementById('op-reply');
                                    box.value = 'مرحبا'; return box.matches(':dir(rtl)'); }""")


def test_widget_on_a_touch_screen_keeps_enter_for_a_new_line(browser, live_server):
    """A phone's keyboard has no Shift+Enter: Enter sent the half-written question, as the console's did."""
    context = browser.new_context(viewport={"width": 375, "height": 700}, has_touch=True, is_mobile=True)
    try:
        tab = context.new_page()
        _open(tab, live_server)
        tab.focus("#gw-input")
        tab.keyboard.type("My invoice")
        tab.keyboard.press("Enter")
        tab.keyboard.type("is wrong")
        assert tab.locator("#gw-input").input_value() == "My invoice\nis wrong"
        assert tab.locator(".gw-msg--contact").count() == 0  # nothing sent
    finally:
        context.close()


def test_widget_on_a_touch_screen_describes_its_composer_without_the_enter_hint(browser, live_server):
    """A tablet: wide enough for the hint, but its Enter starts a new line. The hint said "Enter to send"
    there, and a screen reader read it out as the composer's description."""
    for touch, hint_shown, described_by in [(True, False, "gw-count"), (False, True, "gw-hint gw-count")]:
        context = browser.new_context(viewport={"width": 900, "height": 700}, has_touch=touch, is_mobile=touch)
        try:
            tab = context.new_page()
            _open(tab, live_server)
            assert tab.locator("#gw-hint").is_visible() == hint_shown
            assert tab.locator("#gw-input").get_attribute("aria-describedby") == described_by
        finally:
            context.close()
