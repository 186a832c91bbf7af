"""Fixtures for the web chat tests: the real app on a real port, and Debian's Chromium through Playwright.

The app is started once per module (migrations, sample knowledge base ingest, uvicorn in a thread), so
the browser tests pay for embeddings only once.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HELP_CENTER = REPO / "examples" / "help-center"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    """Debian's Chromium. Outside CI a missing browser skips with the reason; under CI=true it fails."""
    if CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    message = (f"{CHROMIUM} is not installed: `apt-get install -y chromium` to run the widget's browser tests"
               " (.ci/run does this)")
    if _in_ci():
        pytest.fail(message + "; CI=true, so this is a failure, not a skip")
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(chromium_path: Path):
    """A headless Chromium for the module; Playwright's bundled driver needs no network."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@dataclass(frozen=True)
class LiveServer:
    """The real gateway app served on 127.0.0.1 at an ephemeral port."""

    url: str
    config_path: Path
    bot: str


def write_config(root: Path, *, bot: str = "acme", docs: Path = HELP_CENTER,
                 operator_token_env: str | None = None) -> Path:
    """A config.yaml with every store inside `root` and one bot answering from `docs` with the offline model;
    with `operator_token_env`, operator `sam` for that bot, whose token is read from that variable."""
    operators = (f"""operators:
  - name: sam
    token: "${{{operator_token_env}}}"
    bots: [{bot}]
""" if operator_token_env else "")
    config = root / "config.yaml"
    config.write_text(
        f"""
database_url: "sqlite+aiosqlite:///{root / 'gateway.db'}"
qdrant:
  path: "{root / 'qdrant'}"
{operators}bots:
  - name: {bot}
    model: offline
    sources:
      - name: help-center
        type: directory
        path: "{docs}"
        schedule: "0 3 * * *"
    channels:
      web: {{}}
""",
        encoding="utf-8",
    )
    return config


def _prepare(config: Path) -> None:
    """`db upgrade` then `ingest`, as `make run` does. In a thread of its own: the CLI calls asyncio.run,
    which refuses to run where sync Playwright already drives an event loop."""
    from gateway.cli import main as cli

    codes: list[int] = []

    def run() -> None:
        codes.append(cli(["db", "upgrade", "--config", str(config)]))
        codes.append(cli(["ingest", "--config", str(config)]))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert codes == [0, 0], f"db upgrade / ingest exit codes: {codes}"


@contextmanager
def serving(app, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread (on an ephemeral port unless `port`); yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    from gateway.cli import GRACEFUL_SHUTDOWN_S

    # As `serve` does: a browser tab's open SSE stream would otherwise hold the shutdown until the join gives up.
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start; see the log above")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Migrate, ingest the sample help center, then serve `create_app(settings)` with uvicorn in a thread."""
    from gateway.app import create_app
    from gateway.settings import load_settings

    root = tmp_path_factory.mktemp("webchat")
    docs = root / "help-center"
    shutil.copytree(HELP_CENTER, docs)
    config = write_config(root, docs=docs)
    _prepare(config)
    app = create_app(load_settings(config), start_scheduler=False)

    with serving(app) as url:
        yield LiveServer(url=url, config_path=config, bot="acme")


@pytest.fixture()
def page(browser, live_server):
    """A fresh browser context per test: its own localStorage, so its own web chat session."""
    context = browser.new_context()
    tab = context.new_page()
    tab.errors = []
    record_page_errors(tab, tab.errors)
    try:
        yield tab
    finally:
        context.close()


def record_page_errors(tab, errors: list[str]) -> None:
    """Append to `errors` each uncaught script error of `tab` and each dialog it opens (dismissed, so the page
    goes on): what text run as code instead of shown would leave."""
    tab.on("pageerror", lambda exc: errors.append(f"error: {exc}"))
    tab.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))


def ask_in_chat(tab, url: str, text: str) -> None:
    """Open the web chat at `url`, wait until it is ready, and send `text` (as a customer presses Enter)."""
    tab.goto(url)
    tab.wait_for_selector("#gw-chat[data-ready='true']")
    tab.fill("#gw-input", text)
    tab.press("#gw-input", "Enter")


def hostile_images_had_their_turn(page) -> None:
    """Return once an `<img src=x onerror=…>` built from hostile text, were there one, has run its onerror.

    Such an image asked for the page's `x` when it was built; an image of the same URL asked for now fails
    after it (the same resource, or a later request for it), so its error event is the barrier."""
    page.evaluate("""() => new Promise(done => {
      const probe = new Image();
      probe.onerror = probe.onload = () => done(true);
      probe.src = 'x';
    })""")
