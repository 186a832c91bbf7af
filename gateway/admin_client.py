"""The CLI's way into a running server: Qdrant local mode lets one process open its folder, so
`gateway ingest` beside `gateway serve` sends the job to the server's admin route instead, and
`gateway chat` talks to the server's web chat.

The server writes its admin token (readable by its user only) and the URL it listens on next to
the index folder, named after it (`var/qdrant.admin.token`, `var/qdrant.admin.url`); both go when it
stops. Named after the folder: two configurations whose index folders share a parent once shared
one `admin.token`, and `gateway ingest` sent its job to the server holding the other index.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli_output import print_reports, progress_bar, told_if_interrupted
from gateway.observability.logs import one_terminal_line, redact

NDJSON = "application/x-ndjson"  # the admin ingest route streams progress lines when asked for this
# Longest wait for the next line of that stream: the server sends one at least every 15 s while the
# ingest runs (a heartbeat when nothing moved), so only a server that is gone is waited out this long.
READ_TIMEOUT_S = 120.0
# What holds the folder when no server does: a second `gateway ingest` beside the first, most often.
NOT_A_SERVER = (", so it is most likely another `gateway ingest` or `gateway chat` on this config. Wait for it to end "
                "(or stop it) and run this again.")
THROUGH_SERVER_INTERRUPTED = "the server goes on with the ingest and records it; `gateway ingest-runs` shows how it ended"

if TYPE_CHECKING:  # imported when used: every CLI command imports this module, and starts fast
    from gateway.settings import Settings


def admin_files(qdrant_path: str) -> tuple[Path, Path]:
    """Where the server holding the index folder `qdrant_path` writes its admin token and its URL."""
    folder = Path(qdrant_path)
    return (folder.with_name(f"{folder.name}.admin.token"), folder.with_name(f"{folder.name}.admin.url"))


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches a server bound to `host:port` at (a wildcard bind
    is reached on loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def ingest_via_server(settings: Settings, *, bot: str | None, source: str | None, as_json: bool) -> int:
    """Run an ingest in the server that holds the index, and print its reports; returns the exit code.

    At a terminal the server streams its progress (NDJSON lines), drawn as the same bar as a local ingest."""
    token_path, url_path = admin_files(settings.qdrant.path)
    if not token_path.exists():
        print(f"error: {settings.qdrant.path} is in use by another process, and no running gateway server "
              f"was found to ingest through ({token_path} is missing){NOT_A_SERVER}", file=sys.stderr)
        return 1
    # The server records where it listens; a server started without `gateway serve` (tests, a custom
    # ASGI runner) does not, and then HOST/PORT say where it is.
    url = url_path.read_text().strip() if url_path.exists() else local_url(
        os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8000")))
    print(f"{settings.qdrant.path} is held by the running server; ingesting through it at {url}", file=sys.stderr)
    # The server ingests with the configuration it loaded; it refuses (409) when ours differs.
    params = {k: v for k, v in (("bot", bot), ("source", source)) if v}
    params["config_fingerprint"] = settings.ingest_fingerprint()
    schedules: dict[str, str] = {}
    # The bar is closed before the reports print: they go to stdout.
    with told_if_interrupted(THROUGH_SERVER_INTERRUPTED), progress_bar(as_json=as_json) as bar:
        outcome = await _ingest_on_server(url, params, token=token_path.read_text().strip(), progress=bar.callback,
                                          schedules=schedules, settings=settings)
    for note in schedule_notes(settings, schedules):
        print(f"note: {note}", file=sys.stderr)
    return outcome if isinstance(outcome, int) else print_reports(outcome, as_json=as_json)


def schedule_notes(settings: Settings, loaded: dict[str, str]) -> list[str]:
    """What the running server's schedules (`loaded`, "bot/source" -> cron) differ in from the config
    file's now. An edited schedule was silently ignored until a restart: the ingest went through, and
    the source kept running on the old cron."""
    from gateway.cron import cron_fields

    notes = []
    for bot in settings.bots:
        for source in bot.sources:
            running = loaded.get(f"{bot.name}/{source.name}")
            if running is not None and cron_fields(running) != cron_fields(source.schedule):
                notes.append(f"the running server runs {bot.name}/{source.name} on {running!r}, as loaded at start, not "
                             f"on {source.schedule!r} as {settings.config_path or 'the config'} now says: restart it "
                             "to use the new schedule")
    return notes


async def _ingest_on_server(url: str, params: dict[str, str], *, token: str,
                            progress: Callable[[int, int, str], None] | None,
                            schedules: dict[str, str] | None = None,
                            settings: Settings | None = None) -> list[dict] | int:
    """The runs of the server's ingest, or the exit code of an error (already printed); the server's
    schedules, when it sends them, go into `schedules`. A refusal for another configuration says what
    differs from `settings`."""
    import httpx

    # Streamed also without a bar to draw (--json, cron, CI): the lines keep the connection alive, where
    # one JSON answer at the end had to come within an hour.
    headers = {"Authorization": f"Bearer {token}", "Accept": NDJSON}
    runs = failure = None
    streamed = False
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=10.0)) as client:
            async with client.stream("POST", f"{url}/v1/admin/ingest", params=params, headers=headers) as response:
                streamed = response.status_code == 200 and response.headers.get("content-type", "").startswith(NDJSON)
                if not streamed:
                    await response.aread()
                else:
                    async for line in response.aiter_lines():
                        event = _event(line)
                        _print_warning(event)
                        if isinstance(shown := event.get("progress"), dict) and progress is not None:
                            progress(shown.get("done", 0), shown.get("total", 0), str(shown.get("label", "ingest")))
                        runs = event["runs"] if isinstance(event.get("runs"), list) else runs
                        if isinstance(event.get("schedules"), dict) and schedules is not None:
                            schedules.update(event["schedules"])
                        failure = event.get("error", failure)
    except (httpx.HTTPError, ValueError) as exc:
        if not streamed:
            print(f"error: the index is busy and the server at {url} did not answer ({str(exc) or type(exc).__name__}). "
                  "Stop the process that holds the index and retry.", file=sys.stderr)
            return 1
        failure = failure or (f"a line that is not an event: {exc}" if isinstance(exc, ValueError)
                              else f"the connection broke: {str(exc) or type(exc).__name__}")
    if response.status_code == 404:  # an unknown bot or source: the same message and code as without a server
        print(f"error: {_error_of(response)}", file=sys.stderr)
        return 2
    if response.status_code == 409:  # the server runs with another configuration than ours
        print(f"error: {_refusal(response, settings)}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        print(f"error: server refused the ingest: {response.status_code} {response.text}", file=sys.stderr)
        return 1
    if streamed and runs is None:
        print(f"error: the server at {url} stopped before the ingest ended ({failure or 'no result came'}); run "
              "`gateway ingest` again (unchanged documents are skipped)", file=sys.stderr)
        return 1
    if not streamed:
        body = response.json()
        for event in body.get("warnings") or ():
            _print_warning(event)
        if isinstance(body.get("schedules"), dict) and schedules is not None:
            schedules.update(body["schedules"])
        return body["runs"]
    return runs


def _print_warning(event: object) -> None:
    """A warning the server's run logged, printed as a local ingest logs it; anything else is left alone."""
    if isinstance(event, dict) and isinstance(warning := event.get("warning"), str):
        # One line, obeyed by no terminal: a warning may quote what a site wrote.
        print(one_terminal_line(f"{event.get('level', 'warning')}: {warning}"), file=sys.stderr)


def _event(line: str) -> dict:
    """One NDJSON line of the admin ingest stream; {} for a blank line. ValueError for anything else
    than a JSON object: the stream is broken then."""
    if not line.strip():
        return {}
    event = json.loads(line)
    if not isinstance(event, dict):
        raise ValueError(repr(line[:80]))
    return event


def _refusal(response, settings: Settings | None) -> str:
    """Why the server refused a job of another configuration: what differs, and what to do. A server of an
    older version sends only its message, which named its file and not what in it was not ours."""
    from gateway.config_diff import credential_keys, differences, masked, said

    try:
        body = response.json()
        loaded, theirs = body["loaded"], body.get("config_path")
    except (ValueError, KeyError, TypeError, AttributeError):
        loaded = theirs = None
    if loaded is None or settings is None:
        return _error_of(response)
    ours = settings.config_path or "this configuration"
    head = (f"the running server ingests with {ours} as it was when it started, and the file has changed since"
            if theirs == ours else f"the running server ingests with {theirs or 'its configuration'} as it was when "
            f"it started, and {ours} differs from it")
    # Compared masked: the server masks the credentials in what it sends (an older one does not).
    found = said(differences(masked(loaded), masked(settings.ingest_config())), theirs="the server", ours="the file")
    # Nothing else differs, so a credential does, which neither side shows.
    hidden = credential_keys(settings.ingest_config())
    found = found or (f"{' or '.join(hidden)}: a credential in a URL (masked on both sides, so not shown)" if hidden
                      else "keys this CLI does not know (the server runs another version of the gateway)")
    # Another file than the server's: a plain restart (`make run` too) would load the server's own again. The same
    # file: `make run`, as the README's "Try it" started it, restarts it and ingests first.
    restart = "the server (`gateway serve`, or `make run`, which ingests first)" if theirs == ours else \
        f"the server on that file (`gateway serve --config {shlex.quote(str(ours))}`)"
    return redact(f"{head} in what an ingest uses: {found}. Restart {restart} to ingest with "
                  f"{ours}, or stop it and run `gateway ingest` again")


def _error_of(response) -> str:
    """The message of a JSON error body ({"error": ...}), else the body as it is."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text


async def chat_via_server(settings: Settings, bot: str, *, session_id: str, converse) -> int:
    """`gateway chat` through the running server's web chat (`converse` is the terminal loop)."""
    import httpx

    web = settings.bot(bot).channels.web
    if web is None or not web.enabled:  # each line was refused, and status 0
        print(f"error: bot {bot!r} has no web chat, which is how `gateway chat` reaches the running server "
              "that holds the index; stop the server to chat with it here, or give it `web: {}`", file=sys.stderr)
        return 1
    url_path = admin_files(settings.qdrant.path)[1]
    if not url_path.exists():
        print(f"error: {settings.qdrant.path} is in use by another process, and no running gateway server was "
              f"found to chat through ({url_path} is missing){NOT_A_SERVER}", file=sys.stderr)
        return 1
    url = url_path.read_text().strip()
    try:  # a server killed (or its machine lost) leaves its URL behind: found before the first question
        async with httpx.AsyncClient(timeout=5) as probe:
            (await probe.get(f"{url}/healthz")).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: {settings.qdrant.path} is in use by another process, and no gateway server answers at {url}, "
              f"where one last recorded it listens ({str(exc) or type(exc).__name__}). Stop the other process (an "
              "ingest, another chat) and retry.", file=sys.stderr)
        return 1
    print(f"{settings.qdrant.path} is held by the running server; chatting through its web chat at {url}",
          file=sys.stderr)
    async with httpx.AsyncClient(base_url=url, timeout=180) as client:

        async def ask(text: str) -> dict:
            response = await client.post(f"/v1/bots/{bot}/chat", json={"session_id": session_id, "text": text})
            if response.status_code >= 400:
                return {"reply": f"(the server refused it: {_error_of(response)})", "citations": []}
            return response.json()

        async def follow(after: int) -> list[dict]:
            response = await client.get(f"/v1/bots/{bot}/sessions/{session_id}/messages", params={"after": after})
            response.raise_for_status()
            return response.json()["messages"]

        try:
            return await converse(bot, ask, follow)
        except httpx.HTTPError as exc:
            print(f"error: the server at {url} did not answer ({exc or type(exc).__name__})", file=sys.stderr)
            return 1
