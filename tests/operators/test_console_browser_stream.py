"""The operator console's live stream read in a real headless Chromium, its bytes cut where a network cuts them."""

from __future__ import annotations

import pytest

from tests.operators.conftest import escalate, sign_in

pytestmark = pytest.mark.browser

# The console's fetch of its live stream, handed on with every chunk cut after each CR of a CRLF: the
# server ends its SSE lines with CRLF, and a proxy or the network may deliver the CR and the LF apart.
SPLIT_CRLF = """
(() => {
  const fetched = window.fetch.bind(window);
  window.fetch = async (input, init) => {
    const response = await fetched(input, init);
    if (!String(input).includes("/v1/escalations/stream") || !response.body) return response;
    const encoder = new TextEncoder(), decoder = new TextDecoder();
    const cut = new TransformStream({
      transform(chunk, controller) {
        decoder.decode(chunk, { stream: true }).split(/(?<=\\r)(?=\\n)/)
          .forEach((piece) => controller.enqueue(encoder.encode(piece)));
      },
    });
    return new Response(response.body.pipeThrough(cut), { status: response.status, headers: response.headers });
  };
})();
"""


def test_console_reads_live_events_whose_crlf_comes_in_two_chunks(open_tab, live_url):
    """The console turned each chunk's CRLFs into LFs before adding it to what it had read, so a CR that
    ended one chunk and the LF that began the next stayed a CRLF: no event ended in its buffer, and the
    list never showed the escalations opened while it was open."""
    operator = open_tab()
    operator.add_init_script(SPLIT_CRLF)
    sign_in(operator, live_url)
    escalation = escalate(live_url, "console-split-crlf", "Split here, I want to talk to a human")
    operator.wait_for_selector(f".op-item[data-id='{escalation}']", timeout=15_000)
