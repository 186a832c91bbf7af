"""The README's iframe snippet, pasted into a page of another origin, gives a working chat; and the API
stays without CORS (the frame talks to its own origin)."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

README = Path(__file__).resolve().parents[2] / "README.md"


@contextmanager
def host_site(html: str) -> Iterator[str]:
    """A site owner's page on another origin (its own port; loopback, as browsers let a local page frame a
    local server without a local-network prompt)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = html.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _snippet() -> str:
    blocks = re.findall(r"```html\n(.*?)```", README.read_text("utf-8"), flags=re.DOTALL)
    frames = [b for b in blocks if "<iframe" in b]
    assert frames, "README.md has no ```html block with the widget's <iframe>"
    return frames[0]


def test_widget_readme_iframe_snippet_works_from_another_origin(browser, live_server):
    snippet = _snippet()
    assert re.search(r'\btitle="[^"]+"', snippet) and "allow=" in snippet and "height=" in snippet
    frame_html = snippet.replace("https://chat.example.com", live_server.url)
    host_page = f"<!doctype html><html><body><h1>Shop</h1>{frame_html}</body></html>"

    with host_site(host_page) as host:
        context = browser.new_context()
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(host + "/")
            assert page.evaluate("() => location.origin") != live_server.url  # really another origin
            chat = page.frame_locator("iframe")
            chat.locator("#gw-chat[data-ready='true']").wait_for(timeout=30_000)
            chat.locator("#gw-input").fill("How do I fix sync error E-SYNC-409?")
            chat.locator("#gw-input").press("Enter")
            # The answer's bubble goes in empty at its first token and is filled at the next frame: words in it
            # are waited for (read as soon as the bubble showed, it could still be empty).
            expect(chat.locator(".gw-msg--bot .gw-bubble").first).to_have_text(re.compile(r"\S"), timeout=60_000)
            # Cross-origin: the host page cannot reach into the frame.
            assert page.evaluate("() => document.querySelector('iframe').contentDocument") is None
            assert errors == []
        finally:
            context.close()

    with urllib.request.urlopen(urllib.request.Request(live_server.url + "/v1/bots",
                                                       headers={"Origin": "http://shop.example.test"})) as response:
        assert response.headers.get("access-control-allow-origin") is None
