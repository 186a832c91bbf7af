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

from tests.web.conftest import ask_in_chat
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


def _own_address() -> str | None:
    """This machine's address on its network (not loopback), or None: the route to a TEST-NET address names it
    (a UDP `connect` sends nothing)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture(scope="module")
def plain_http_server(tmp_path_factory):
    """The gateway over plain http on this machine's network address, as on a LAN: not a "potentially
    trustworthy" origin, to which browsers send no `Sec-Fetch-*` header at all."""
    from gateway.app import create_app
    from gateway.settings import load_settings
    from tests.web.conftest import _prepare, serving, write_config

    address = _own_address()
    if address is None:
        pytest.skip("this machine has no network address but loopback")
    root = tmp_path_factory.mktemp("plain-http")
    config = write_config(root)
    _prepare(config)
    with serving(create_app(load_settings(config), start_scheduler=False), host=address) as url:
        yield type("Served", (), {"url": url, "bot": "acme"})


def test_a_page_of_another_site_cannot_post_into_a_chat_served_over_plain_http(browser, plain_http_server):
    """Browsers send `Sec-Fetch-Site` only to https (and loopback) origins: over plain http the refusal above
    relied on a header that never came, and another site's page posted into the chat. `Origin` comes with every
    browser's cross-origin POST, secure or not."""
    server, session = plain_http_server, "web-posted-over-plain-http"
    attack = f"""<!doctype html><html><body><script>
      fetch("{server.url}/v1/bots/{server.bot}/chat", {{method: "POST", mode: "no-cors",
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
    assert _transcript(server, session) == []
    # The widget itself, on that same plain-http origin, still chats: its posts are same-origin.
    page = browser.new_page()
    try:
        ask_in_chat(page, f"{server.url}/?bot={server.bot}", "How do I reset my password?")
        page.wait_for_selector(".gw-msg--bot .gw-bubble", timeout=60_000)
        assert page.inner_text(".gw-msg--bot .gw-bubble").strip()
    finally:
        page.close()
