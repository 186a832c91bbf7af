"""The widget on a `reset` event, in a real headless Chromium against the real app: what streamed is
withdrawn (a tool round's text before its call, a dead attempt's tokens), and the visitor sees the typing
indicator again, not an empty bubble, until the answer comes."""

from __future__ import annotations

import pytest

from tests.web.test_widget_browser import _ask, _open
from tests.web.test_widget_resilience import _bubbles, _fake_transcript, _idle

pytestmark = pytest.mark.browser

RESET_STREAM = """
(() => {
  const realFetch = window.fetch;
  window.fetch = (url, init) => {
    if (String(url).endsWith('/chat') && init && /event-stream/.test(init.headers.Accept)) {
      const enc = new TextEncoder();
      const event = (name, data) => enc.encode('event: ' + name + '\\ndata: ' + JSON.stringify(data) + '\\n\\n');
      const body = new ReadableStream({
        start(controller) {
          controller.enqueue(event('token', {text: 'Plans are in the billing guide [1].'}));
          setTimeout(() => controller.enqueue(event('reset', {})), 100);
          window.releaseAnswer = () => {
            controller.enqueue(event('done', {reply: 'Your invoice is paid.', citations: [], conversation_id: 1,
                                              state: 'bot', message_id: 7}));
            controller.close();
          };
        },
      });
      return Promise.resolve(new Response(body, {status: 200, headers: {'content-type': 'text/event-stream'}}));
    }
    return realFetch(url, init);
  };
})();
"""


def test_widget_shows_typing_not_an_empty_bubble_after_a_reset(page, live_server):
    """A tool round's streamed text is withdrawn by `reset`: the bubble stayed, empty, with no typing
    indicator, while the tool ran and the answer was written (review)."""
    page.add_init_script(RESET_STREAM)
    _fake_transcript(page)
    _open(page, live_server)
    _ask(page, "Is my invoice paid?")
    page.wait_for_selector(".gw-msg--bot .gw-bubble:has-text('billing guide')")

    page.wait_for_selector(".gw-msg--bot", state="detached")
    assert page.locator("#gw-typing").is_visible()
    page.evaluate("window.releaseAnswer()")
    _idle(page)
    assert _bubbles(page) == ["Is my invoice paid?", "Your invoice is paid."] and page.errors == []
