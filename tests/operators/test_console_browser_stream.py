"""The operator console in a real headless Chromium, fed as networks and people feed it: its live stream cut
where a network cuts it, a reply or a note pasted longer than the limit."""

from __future__ import annotations

import pytest

from tests.operators.conftest import escalate, open_escalation, sign_in

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


@pytest.mark.parametrize(("box", "text", "stored"), [
    ("#op-reply", "Step by step: ", ".op-msg--operator"),
    ("#op-note", "Context: ", "#op-notes li"),
], ids=["reply", "note"])
def test_console_keeps_all_of_a_pasted_text_over_the_limit_and_says_it_is_too_long(open_tab, live_url, box, text,
                                                                                  stored):
    """The reply and note boxes' maxlength cut a pasted text at 4,000 UTF-16 units without a word (an emoji
    counts two there, one for the server), and Send reply sent the customer its first part only (Add note
    stored its first part only)."""
    escalation = escalate(live_url, f"console-long-{box[4:]}", "Long paste here, I want to talk to a human")
    operator = open_tab()
    open_escalation(operator, live_url, escalation)
    operator.focus(box)
    operator.keyboard.insert_text(text + "x" * 4100)
    assert len(operator.locator(box).input_value()) == len(text) + 4100
    operator.press(box, "Enter")
    operator.wait_for_selector("#op-error:not([hidden])")
    assert "4000" in operator.locator("#op-error").inner_text()
    assert len(operator.locator(box).input_value()) == len(text) + 4100  # kept, to be shortened
    assert operator.locator(stored).count() == 0
