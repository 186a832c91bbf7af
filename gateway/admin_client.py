"""The CLI's way into a running server: Qdrant local mode lets one process open its folder, so
`gateway ingest` beside `gateway serve` sends the job to the server's admin route instead, and
`gateway chat` talks to the server's web chat.

The server writes its admin token (readable by its user only) and the URL it listens on next to
the index folder (`var/admin.token`, `var/admin.url`); both go when it stops.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli_output import print_reports

if TYPE_CHECKING:  # imported when used: every CLI command imports this module, and starts fast
    from gateway.settings import Settings


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches a server bound to `host:port` at (a wildcard bind
    is reached on loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def ingest_via_server(settings: Settings, *, bot: str | None, source: str | None, as_json: bool) -> int:
    """Run an ingest in the server that holds the index, and print its reports; returns the exit code."""
    import httpx

    token_path = Path(settings.qdrant.path).parent / "admin.token"
    url_path = token_path.with_name("admin.url")
    if not token_path.exists():
        print(f"error: {settings.qdrant.path} is in use by another process, and no running gateway server "
              f"was found to ingest through ({token_path} is missing). Stop the other process and retry.",
              file=sys.stderr)
        return 1
    # The server records where it listens; a server started without `gateway serve` (tests, a custom
    # ASGI runner) does not, and then HOST/PORT say where it is.
    url = url_path.read_text().strip() if url_path.exists() else local_url(
        os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8000")))
    print(f"{settings.qdrant.path} is held by the running server; ingesting through it at {url}", file=sys.stderr)
    # The server ingests with the configuration it loaded; it refuses (409) when ours differs.
    params = {k: v for k, v in (("bot", bot), ("source", source)) if v}
    params["config_fingerprint"] = settings.ingest_fingerprint()
    try:
        async with httpx.AsyncClient(timeout=3600) as client:
            response = await client.post(f"{url}/v1/admin/ingest", params=params,
                                         headers={"Authorization": f"Bearer {token_path.read_text().strip()}"})
    except httpx.HTTPError as exc:
        print(f"error: the index is busy and the server at {url} did not answer ({exc or type(exc).__name__}). "
              "Stop the process that holds the index and retry.", file=sys.stderr)
        return 1
    if response.status_code == 404:  # an unknown bot or source: the same message and code as without a server
        print(f"error: {_error_of(response)}", file=sys.stderr)
        return 2
    if response.status_code == 409:  # the server runs with another configuration than ours
        print(f"error: {_error_of(response)}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        print(f"error: server refused the ingest: {response.status_code} {response.text}", file=sys.stderr)
        return 1
    return print_reports(response.json()["runs"], as_json=as_json)


def _error_of(response) -> str:
    """The message of a JSON error body ({"error": ...}), else the body as it is."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text


async def chat_via_server(settings: Settings, bot: str, *, session_id: str, converse) -> int:
    """`gateway chat` through the running server's web chat (`converse` is the terminal loop)."""
    import httpx

    url_path = Path(settings.qdrant.path).parent / "admin.url"
    if not url_path.exists():
        print(f"error: {settings.qdrant.path} is in use by another process, and no running gateway server was "
              f"found to chat through ({url_path} is missing). Stop the other process and retry.", file=sys.stderr)
        return 1
    url = url_path.read_text().strip()
    print(f"{settings.qdrant.path} is held by the running server; chatting through its web chat at {url}",
          file=sys.stderr)
    async with httpx.AsyncClient(base_url=url, timeout=180) as client:

        async def ask(text: str) -> dict:
            response = await client.post(f"/v1/bots/{bot}/chat", json={"session_id": session_id, "text": text})
            if response.status_code >= 400:
                return {"reply": f"(the server refused it: {_error_of(response)})", "citations": []}
            return response.json()

        try:
            return await converse(bot, ask)
        except httpx.HTTPError as exc:
            print(f"error: the server at {url} did not answer ({exc or type(exc).__name__})", file=sys.stderr)
            return 1
