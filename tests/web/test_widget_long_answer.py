"""A very long answer streamed to the widget, in a real headless Chromium against the real app: tokens that
come many at once (a slow network delivering what it held, a long answer's end) are drawn together."""

from __future__ import annotations

import pytest

from tests.web.test_widget_browser import _ask, _open
from tests.web.test_widget_resilience import _bubbles, _fake_transcript, _idle

pytestmark = pytest.mark.browser
TOKENS = 2000

# The answer's 2,000 tokens arrive in one piece of the body, the `done` only once the test releases it.
LONG_STREAM = """
(() => {
  const realFetch = window.fetch;
  window.fetch = (url, init) => {
    if (String(url).endsWith('/chat') && init && /event-stream/.test(init.headers.Accept)) {
      const enc = new TextEncoder();
      const event = (name, data) => 'event: ' + name + '\\r\\ndata: ' + JSON.stringify(data) + '\\r\\n\\r\\n';
      let tokens = '', text = '';
      for (let i = 0; i < %d; i++) { tokens += event('token', {text: 'word' + i + ' '}); text += 'word' + i + ' '; }
      const body = new ReadableStream({
        start(controller) {
          controller.enqueue(enc.encode(tokens));
          window.releaseAnswer = () => {
            controller.enqueue(enc.encode(event('done', {reply: text.trim(), citations: [], conversation_id: 1,
                                                         state: 'bot', message_id: 7})));
            controller.close();
          };
        },
      });
      return Promise.resolve(new Response(body, {status: 200, headers: {'content-type': 'text/event-stream'}}));
    }
    return realFetch(url, init);
  };
})();
""" % TOKENS

COUNT_DRAWINGS = """
() => {
  window.drawings = 0;
  new MutationObserver((records) => {
    records.forEach((r) => { if (r.target.classList && r.target.classList.contains('gw-bubble')) window.drawings++; });
  }).observe(document.getElementById('gw-transcript'), {childList: true, subtree: true});
}
"""


def test_widget_draws_a_burst_of_tokens_once_not_once_a_token(page, live_server):
    """Each token drew the whole answer again (its Markdown parsed, its bubble rebuilt): 2,000 tokens that
    came together took 10 s of the page's time here, 34,000 characters in 4,000 tokens 42 s, the tab frozen."""
    page.add_init_script(LONG_STREAM)
    _fake_transcript(page)
    _open(page, live_server)
    page.evaluate(COUNT_DRAWINGS)
    _ask(page, "Tell me everything")
    last = f"word{TOKENS - 1}"
    page.wait_for_function(f"() => [...document.querySelectorAll('.gw-msg--bot .gw-bubble')]"
                           f".some((b) => b.textContent.trim().endsWith('{last}'))", timeout=60_000)
    drawings = page.evaluate("window.drawings")
    assert drawings < 50, drawings
    page.evaluate("window.releaseAnswer()")
    _idle(page)
    bubbles = _bubbles(page)
    assert len(bubbles) == 2 and bubbles[1].startswith("word0 word1") and bubbles[1].endswith(last)
    assert page.errors == []
