"""A page of another site, open in a visitor's browser, cannot post into the web chat through it.

Why: a body without a `Content-Type` is read as JSON (README), and a browser's `fetch(..., {mode: "no-cors",
body: new Blob([...])})` sends one with no type and no CORS preflight. Any site could then make each of its
visitors' browsers write to the bot (each from its own address, so each with a fresh per-address budget):
the model's cost, escalations for the operators. The widget talks to its own origin, framed or not.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.web.test_widget_embed import host_site

pytestmark = pytest.mark.browser


def _transcript(live_server, session: str) -> list[dict]:
    url = f"{live_server.url}/v1/bots/{live_server.bot}/sessions/{session}/messages"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())["messages"]


def test_a_page_of_another_site_cannot_post_into_the_chat_from_its_visitors_browser(browser, live_server):
    session = "web-posted-from-another-site"
    attack = f"""<!doctype html><html><body><script>
      fetch("{live_server.url}/v1/bots/{live_server.bot}/chat", {{method: "POST", mode: "no-cors",
            body: new Blob([JSON.stringify({{session_id: "{session}", text: "How do I reset my password?"}})])}})
        .then(() => {{ document.title = "done"; }}, () => {{ document.title = "done"; }});
    </script></body></html>"""
    with host_site(attack) as site:
        page = browser.new_page()
        try:
            page.goto(site + "/")
            page.wait_for_function("document.title === 'done'", timeout=30_000)
        finally:
            page.close()
    assert _transcript(live_server, session) == []
    # A client that is no browser page (a backend, curl) sends no Sec-Fetch-Site, and still chats.
    request = urllib.request.Request(f"{live_server.url}/v1/bots/{live_server.bot}/chat", method="POST",
                                     data=json.dumps({"session_id": session, "text": "How do I reset my password?"}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert [m["direction"] for m in _transcript(live_server, session)][:1] == ["in"]
