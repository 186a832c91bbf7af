"""Replies are Markdown (channels/web.py): the widget renders a safe subset as DOM nodes it builds, and
everything else, hostile or naughty, as text. In a real headless Chromium against the real app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.web.conftest import hostile_images_had_their_turn
from tests.web.test_widget_browser import _ask, _open, _sse, _wait_bot_text

pytestmark = pytest.mark.browser

BLNS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "badinput" / "blns.json").read_text("utf-8"))
ALLOWED = {"P", "STRONG", "EM", "DEL", "CODE", "PRE", "UL", "OL", "LI", "A", "SUP", "SPAN", "BLOCKQUOTE"}
REL = "noopener noreferrer nofollow"

MARKDOWN_REPLY = """**Reset** the *sync token* with `gw sync --reset` [1].

1. Open **Settings**
2. Press *Sync now* [2]

- see [the guide](https://help.acme.example/sync)
- not [this](javascript:window.__pwned=1) nor [that](data:text/html,x)

```
<script>window.__pwned=1</script> **not bold**
```
Unknown marker [9] and 2 * 3 * 4 and **unclosed"""
CITATIONS = [{"source": "sync.md", "title": "Sync", "url": "https://help.acme.example/sync#token"},
             {"source": "app.md", "title": "<img src=x onerror=window.__pwned=1>", "url": "javascript:window.__pwned=1"}]


def test_widget_renders_markdown_subset_as_built_nodes(page, live_server):
    done = {"reply": MARKDOWN_REPLY, "citations": CITATIONS, "conversation_id": 1, "state": "bot", "message_id": 1}
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"},
        body=_sse(("token", {"text": "**Reset** the"}), ("done", done))))
    _open(page, live_server)
    _ask(page, "How do I reset sync?")
    _wait_bot_text(page)
    bubble = page.locator(".gw-msg--bot .gw-bubble")

    assert bubble.locator("strong").all_inner_texts()[:2] == ["Reset", "Settings"]
    assert bubble.locator("em").all_inner_texts()[:2] == ["sync token", "Sync now"]
    assert bubble.locator("p code").inner_text() == "gw sync --reset"
    assert bubble.locator("ol > li").count() == 2 and bubble.locator("ul > li").count() == 2
    assert bubble.locator("pre code").inner_text() == "<script>window.__pwned=1</script> **not bold**"
    links = bubble.locator("a").evaluate_all(
        "as => as.map(a => [a.className, a.getAttribute('href'), a.rel, a.target, a.textContent])")
    assert links == [
        ["gw-cite-link", "https://help.acme.example/sync#token", REL, "_blank", "[1]"],
        ["gw-link", "https://help.acme.example/sync", REL, "_blank", "the guide"],
    ]
    text = bubble.inner_text()
    for literal in ("[this](javascript:window.__pwned=1)", "[that](data:text/html,x)", "[9]", "2 * 3 * 4",
                    "**unclosed"):
        assert literal in text, literal
    # [2]'s source has no http(s) URL: a marker with the title as a tooltip, not a link.
    assert bubble.locator("sup.gw-cite span").inner_text() == "[2]"
    assert bubble.locator("sup.gw-cite span").get_attribute("title") == "<img src=x onerror=window.__pwned=1>"
    assert page.locator(".gw-msg--bot .gw-source-n").all_inner_texts() == ["1", "2"]
    assert page.locator("#gw-transcript script, #gw-transcript img").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert page.errors == []


INJECTIONS = [
    "[x](javascript:window.__pwned=1)", "[x](JaVaScRiPt:window.__pwned=1)", "[x]( javascript:window.__pwned=1)",
    "[x](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0xPC9zY3JpcHQ+)", "[x](vbscript:msgbox(1))",
    "[x](//evil.example/)", "[x](/relative)", "[<img src=x onerror=window.__pwned=1>](https://ok.example/)",
    "[a](https://ok.example/\"onmouseover=\"window.__pwned=1)", "**<img src=x onerror=window.__pwned=1>**",
    "*<svg onload=window.__pwned=1>*", "`<iframe src=javascript:window.__pwned=1>`",
    "```\n</code></pre><script>window.__pwned=1</script>\n```", "- <a href=javascript:window.__pwned=1>x</a>",
    "1. <style>*{display:none}</style>", "[1]", "[[x](javascript:1)](https://ok.example/)",
    "<!--", "]]>", "&lt;script&gt;window.__pwned=1&lt;/script&gt;", "**" * 2000, "[" * 3000 + "]" * 3000,
    "*a" * 2000, "`" * 5000, "- " * 1000, "\n".join(["```"] * 300),
    "> <img src=x onerror=window.__pwned=1>", "~~<svg onload=window.__pwned=1>~~", "_<img src=x onerror=window.__pwned=1>_",
    "[x](<javascript:window.__pwned=1>)", "[x](https://ok.example/(a)\"onmouseover=\"window.__pwned=1)",
    "> " * 3000, "\n".join(["> x"] * 2000), "_a" * 2000, "~~" * 2000, "[x](" + "(a)" * 3000 + ")",
]

CHECK_ALL = """({texts, allowed, rel}) => {
  const problems = [];
  const citations = [{source: 's', title: '<b>t</b>', url: 'javascript:window.__pwned=1'},
                     {source: 'u', title: 'ok', url: 'https://ok.example/source'}];
  texts.forEach((text, i) => {
    let li;
    try {
      li = window.GatewayWidget.appendMessage({id: 100000 + i, direction: 'out', author: 'bot', text, citations});
    } catch (e) { problems.push([i, 'threw ' + e]); return; }
    const bubble = li.querySelector('.gw-bubble');
    bubble.querySelectorAll('*').forEach(node => {
      if (!allowed.includes(node.tagName)) problems.push([i, 'tag ' + node.tagName]);
      for (const attr of node.attributes) {
        if (!['class', 'href', 'target', 'rel', 'title', 'start'].includes(attr.name)) problems.push([i, 'attr ' + attr.name]);
      }
      if (node.tagName === 'A') {
        if (!/^https?:\\/\\//.test(node.getAttribute('href'))) problems.push([i, 'href ' + node.getAttribute('href')]);
        if (node.rel !== rel) problems.push([i, 'rel ' + node.rel]);
      }
    });
    // With no Markdown syntax (nor entity, nor escape) in it, a text is shown exactly.
    const plain = !/[*_`\\[~&\\\\\\r\\n]/.test(text) && !/^\\s*([-*+>]|\\d+[.)])/.test(text) && text.trim() !== '';
    if (plain && bubble.textContent !== text) problems.push([i, 'text ' + JSON.stringify(bubble.textContent)]);
  });
  return problems;
}"""


def test_widget_markdown_renderer_keeps_blns_and_injections_inert(page, live_server):
    _open(page, live_server)
    texts = [t for t in BLNS if isinstance(t, str)] + INJECTIONS
    problems = page.evaluate(CHECK_ALL, {"texts": texts, "allowed": sorted(ALLOWED), "rel": REL})
    assert problems == []
    transcript = page.locator("#gw-transcript")
    assert transcript.locator("script, img, svg, iframe, style, b").count() == 0
    hostile_images_had_their_turn(page)
    assert page.evaluate("() => window.__pwned") is None
    assert page.errors == []


HEADINGS_AND_TABLE = """() => {
  const li = window.GatewayWidget.appendMessage({id: 7, direction: 'out', author: 'bot', citations: [
    {source: 'p.md', title: 'Plans', url: 'https://help.acme.example/plans'}],
    text: '## Plans\\n\\n| Plan | Price |\\n|:---|---:|\\n| Plus | $6 [1] |\\n| **Team** | a \\\\| b |\\n\\nThat is all. ###'});
  const bubble = li.querySelector('.gw-bubble');
  return {text: bubble.innerText, bold: [...bubble.querySelectorAll('strong')].map(n => n.textContent),
          cites: bubble.querySelectorAll('sup.gw-cite a').length};
}"""


def test_widget_shows_a_heading_as_a_bold_line_and_a_table_as_rows(page, live_server):
    """A model's "## Plans" and its table were shown as typed: hashes, pipes and the |:---|---:| line."""
    _open(page, live_server)
    shown = page.evaluate(HEADINGS_AND_TABLE)
    assert shown["text"].split("\n") == ["Plans", "", "Plan | Price", "Plus | $6 [1]", "Team | a | b", "",
                                         "That is all. ###"]
    assert shown["bold"] == ["Plans", "Plan", "Price", "Team"] and shown["cites"] == 1
    assert page.errors == []


QUOTE_ITALIC_STRIKE_LINKS = """() => {
  const li = window.GatewayWidget.appendMessage({id: 8, direction: 'out', author: 'bot', citations: [], text:
    '> Quoted **policy**\\n> second line\\n\\nAn _italic_ word, ~~old~~ new, snake_case_name and 2_000_000.\\n\\n' +
    'See [fees](https://en.wikipedia.org/wiki/Fee_(banking)) and [guide](<https://x.example/a b>).\\n\\n' +
    'Q &amp; A &lt;b&gt; &copy; &#x1F600; &bogus; AT&T `&amp;`\\n\\n\\\\*not em\\\\* \\\\_no\\\\_ C:\\\\dir'});
  const bubble = li.querySelector('.gw-bubble');
  const quote = bubble.querySelector('blockquote');
  return {quote: quote && quote.innerText, quoteBold: quote && quote.querySelector('strong').textContent,
          em: [...bubble.querySelectorAll('em')].map(n => n.textContent),
          del: [...bubble.querySelectorAll('del')].map(n => n.textContent), text: bubble.innerText,
          links: [...bubble.querySelectorAll('a')].map(a => [a.textContent, a.getAttribute('href')])};
}"""


def test_widget_renders_quotes_underscore_italics_strike_and_links_with_parentheses(page, live_server):
    """'> quote', '_italic_', '~~strike~~', '&amp;' and '\\*' were shown as typed, and a URL with '(…)' was cut into text."""
    _open(page, live_server)
    shown = page.evaluate(QUOTE_ITALIC_STRIKE_LINKS)
    assert shown["quote"] == "Quoted policy\nsecond line" and shown["quoteBold"] == "policy"
    assert shown["em"] == ["italic"] and shown["del"] == ["old"]
    assert "snake_case_name and 2_000_000." in shown["text"]
    assert shown["text"].endswith("Q & A <b> © 😀 &bogus; AT&T &amp;\n\n*not em* _no_ C:\\dir")
    assert shown["links"] == [["fees", "https://en.wikipedia.org/wiki/Fee_(banking)"],
                              ["guide", "https://x.example/a%20b"]]
    assert page.errors == []


ES_TEXTS = {"title": "Ayuda", "subtitle": "Respuestas de nuestro centro de ayuda.", "you": "Tú", "assistant": "Asistente",
            "placeholder": "Escribe tu pregunta…", "send": "Enviar", "hint": "Intro para enviar.",
            "empty": "Escribe un mensaje primero."}


def test_widget_speaks_the_bots_language_from_get_v1_bots(page, live_server):
    """Its labels, buttons and notices were English whatever the bot's language (`replies.widget`)."""
    def spanish_bots(route):
        body = route.fetch().json()
        body["bots"][0]["texts"] = {**body["bots"][0]["texts"], **ES_TEXTS}
        body["bots"][0]["lang"] = "es"
        route.fulfill(status=200, headers={"content-type": "application/json"}, body=json.dumps(body))

    page.route("**/v1/bots", spanish_bots)
    done = {"reply": "Pulsa **Sincronizar**.", "citations": [], "conversation_id": 1, "state": "bot", "message_id": 1}
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=_sse(("done", done))))
    _open(page, live_server)
    assert (page.inner_text("#gw-title"), page.inner_text("#gw-subtitle")) == ("Ayuda", ES_TEXTS["subtitle"])
    assert page.evaluate("document.documentElement.lang") == "es"  # it stayed "en": read with an English voice
    assert page.get_attribute("#gw-input", "placeholder") == "Escribe tu pregunta…"
    assert (page.inner_text("#gw-send"), page.inner_text("#gw-hint")) == ("Enviar", "Intro para enviar.")
    page.press("#gw-input", "Enter")
    assert page.inner_text("#gw-error") == "Escribe un mensaje primero."
    _ask(page, "¿Cómo sincronizo?")
    _wait_bot_text(page)
    assert page.locator(".gw-who").all_inner_texts() == ["Tú", "Asistente"]


def test_widget_shows_the_bots_sources_heading_live_and_after_a_reload(page, live_server):
    """The label over the sources was "Sources" whatever language the bot speaks (`replies.sources_heading`)."""
    done = {"reply": "Pulsa **Sincronizar** [1].", "citations": CITATIONS[:1], "sources_heading": "Fuentes:",
            "conversation_id": 1, "state": "bot", "message_id": 1}
    page.route("**/v1/bots/acme/chat", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=_sse(("done", done))))
    _open(page, live_server)
    _ask(page, "¿Cómo sincronizo?")
    _wait_bot_text(page)
    assert page.locator(".gw-msg--bot .gw-sources-label").all_inner_texts() == ["Fuentes:"]

    transcript = {"conversation_id": 1, "state": "bot", "sources_heading": "Quellen:", "messages": [
        {"id": 7, "direction": "out", "author": "bot", "text": "Tippe auf **Sync** [1].", "citations": CITATIONS[:1],
         "status": "sent", "created_at": "2026-11-29T10:00:00+00:00"}]}
    page.route("**/v1/bots/acme/sessions/*/messages*", lambda route: route.fulfill(
        status=200, headers={"content-type": "application/json"}, body=json.dumps(transcript)))
    page.reload()
    page.wait_for_selector(".gw-msg--bot .gw-sources")
    assert page.locator(".gw-msg--bot .gw-sources-label").all_inner_texts() == ["Quellen:"]


# Counts the string and pattern operations (charAt, indexOf, test, exec) each text's drawing makes.
COUNTED = """({texts}) => texts.map((text, i) => {
  let ops = 0;
  const counted = [[String.prototype, 'charAt'], [String.prototype, 'indexOf'], [RegExp.prototype, 'test'],
                   [RegExp.prototype, 'exec']].map(([proto, name]) => [proto, name, proto[name]]);
  counted.forEach(([proto, name, f]) => { proto[name] = function () { ops += 1; return f.apply(this, arguments); }; });
  let li;
  try {
    li = window.GatewayWidget.appendMessage({id: 900 + i, direction: 'out', author: 'bot', text, citations: []});
  } finally {
    counted.forEach(([proto, name, f]) => { proto[name] = f; });
  }
  const bubble = li.querySelector('.gw-bubble');
  let depth = 0;
  for (let em = bubble.querySelector('em'); em; em = em.querySelector('em')) depth += 1;
  return {ops, text: bubble.textContent, ems: bubble.querySelectorAll('em').length, depth};
})"""


def test_widget_draws_many_unmatched_underscores_in_time_linear_in_their_length(page, live_server):
    """Each `_` that could open an _italic_ run looked through every `_` after it for its close, so a reply of
    many unmatched ones took time quadratic in its length: "_a " 2,000 times, 8 million operations."""
    _open(page, live_server)
    texts = ["_a " * 2000, "*_a " * 1500, "_a " * 1000 + "_" * 1000]
    shown = page.evaluate(COUNTED, {"texts": texts})
    assert [(s["text"], s["ems"]) for s in shown[:2]] == [(texts[0], 0), (texts[1], 0)]
    # Each "_a" but the last opens a run that the last of the underscores after it closes.
    assert (shown[2]["text"], shown[2]["ems"], shown[2]["depth"]) == ("a " * 999 + "_a _", 999, 999)
    for text, s in zip(texts, shown):
        assert len(text) < s["ops"] < 40 * len(text)
    assert page.errors == []


# As COUNTED, and what each indexOf looks through: the whole rest of the text when it finds nothing.
SCANNED = COUNTED.replace("ops += 1; return f.apply(this, arguments);", """const r = f.apply(this, arguments);
      ops += name === 'indexOf' ? (r < 0 ? this.length : r + String(arguments[0]).length) - (arguments[1] || 0) : 1;
      return r;""")


def test_widget_draws_nested_italics_and_unmatched_code_runs_in_time_linear_in_their_length(page, live_server):
    """Each mark's inside was drawn by a call of its own: 20,000 nested _italic_ runs overflowed the call stack
    and the reply was not shown (marks 1,000 deep are drawn, deeper ones stay text). Each run of backticks
    looked through the rest of the reply for its close: ever shorter unmatched runs ("````` ```` ``` …",
    80,000 characters) took 11 million steps."""
    _open(page, live_server)
    texts = ["_a " * 20000 + "_" * 20000, "x " + "".join("`" * k + " " for k in range(400, 0, -1)),
             "`a` ``b`` `` `c` `` x ``` y `` `d``` ``"]
    shown = page.evaluate(SCANNED, {"texts": texts})
    assert (shown[0]["ems"], shown[0]["depth"]) == (1000, 1000)
    assert shown[0]["text"] == "a " * 1000 + "_a " * 19000 + "_" * 19000
    assert shown[1]["text"] == texts[1]
    for text, s in zip(texts[:2], shown):
        assert s["ops"] < 40 * len(text)
    codes = page.locator(".gw-msg--bot").last.locator("code").evaluate_all("cs => cs.map(c => c.textContent)")
    assert codes == ["a", "b", " `c` ", " y `` `d"]
    assert page.errors == []
