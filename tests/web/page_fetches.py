"""What a page in the browser tests asked over fetch(), and which answers it has read and acted on.

A test asserting that something did NOT happen after an answer (a late answer not drawn, a request not
sent, an ended request not re-enabling a button) used to wait a fixed few hundred milliseconds for the
page to read that answer: on a loaded machine the page was sometimes slower, and the test passed without
checking anything. Here the page itself says when it is done with an answer: its body was read whole
(`json()`, `text()`, a reader at its end) or the reader was cancelled (an SSE answer at its `done`), and a
task queued then has run, after every promise the page chained on that read. The page's own handling of
an answer is promise continuations (microtasks), so it has run by then.

Add FETCHES with `page.add_init_script(FETCHES)` before the page loads.
"""

from __future__ import annotations

WAIT_MS = 60_000

FETCHES = """
(() => {
  const fetched = window.fetch.bind(window);
  window.__fetches = [];
  window.fetch = async (input, init) => {
    const entry = { url: String(input && input.url || input), method: (init && init.method) || "GET", read: false };
    window.__fetches.push(entry);
    const done = () => setTimeout(() => { entry.read = true; }, 0);
    let response;
    try { response = await fetched(input, init); } catch (err) { done(); throw err; }
    for (const name of ["json", "text"]) {
      const original = response[name].bind(response);
      response[name] = () => { const p = original(); p.then(done, done); return p; };
    }
    const body = response.body;
    if (body) {
      const getReader = body.getReader.bind(body);
      body.getReader = (...args) => {
        const reader = getReader(...args), read = reader.read.bind(reader), cancel = reader.cancel.bind(reader);
        reader.read = () => read().then((chunk) => { if (chunk.done) done(); return chunk; },
                                        (err) => { done(); throw err; });
        reader.cancel = (...why) => { done(); return cancel(...why); };
        return reader;
      };
    }
    return response;
  };
})();
"""


def asked(page, pattern: str, method: str | None = None) -> int:
    """How many fetches the page started whose URL matches the regular expression `pattern`."""
    return page.evaluate(
        "([p, m]) => window.__fetches.filter(f => new RegExp(p).test(f.url) && (!m || f.method === m)).length",
        [pattern, method])


def wait_read(page, pattern: str, *, first: int | None = None) -> None:
    """Wait until the page has read and acted on the answers of its fetches whose URL matches the regular
    expression `pattern`: all it started so far (at least one), or the `first` of them in the order asked."""
    page.wait_for_function(
        """([p, n]) => {
             const matching = window.__fetches.filter(f => new RegExp(p).test(f.url));
             const due = n === null ? matching : matching.slice(0, n);
             return due.length > 0 && due.length === (n === null ? due.length : n) && due.every(f => f.read);
           }""",
        arg=[pattern, first], timeout=WAIT_MS)
