"""Admin endpoints for the local CLI: ingest through the running server.

Qdrant local mode lets one process hold its folder, so `gateway ingest` on the same machine sends
the job here. It authenticates with the token the server writes beside the index folder at start
(`var/qdrant.admin.token`, `gateway.admin_client.admin_files`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import AsyncIterator

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.admin_client import NDJSON
from gateway.config_diff import masked
from gateway.http.deps import error, services
from gateway.observability.logs import redact
from gateway.observability.relay import install, relay_to

router = APIRouter(prefix="/v1/admin", tags=["admin"], include_in_schema=False)
HEARTBEAT_S = 15.0  # a line at least this often while an ingest streams (`gateway.admin_client.READ_TIMEOUT_S`)
HEARTBEAT = json.dumps({"heartbeat": True}) + "\n"
install()  # a streamed ingest's warnings go to its CLI, whatever logs them


@router.post("/ingest")
async def ingest(request: Request, bot: str | None = None, source: str | None = None,
                 config_fingerprint: str | None = None, authorization: str = Header(default="")) -> JSONResponse:
    """Run an ingest now and return its counts, and the warnings it logged (`_progress_lines` when streamed).

    `config_fingerprint` is the caller's `Settings.ingest_fingerprint()`: when it differs from this
    server's, the job would silently run with another configuration, so it is refused (409). A
    caller that sends none (an older CLI) gets the ingest as before.
    """
    svc = services(request)
    if svc.role == "web":
        return error(503, "this process only receives (serve --role web); ingest through the process that "
                          "runs the worker and holds the index")
    supplied = authorization.removeprefix("Bearer ").strip()
    if not supplied or not secrets.compare_digest(supplied.encode(), svc.admin_token.encode()):
        # Said with where the token is: "admin token required" alone left a newcomer trying the route stuck.
        token_file = svc.admin_token_path.name if svc.admin_token_path else "<qdrant.path>.admin.token"
        return error(401, "admin token required: send Authorization: Bearer <token>, the token this server wrote "
                          f"at start to {token_file} beside its index folder (`gateway ingest` on this machine reads it)")
    # The settings are frozen at start, so this is the fingerprint of the configuration the server loaded.
    if config_fingerprint is not None and config_fingerprint != svc.settings.ingest_fingerprint():
        loaded = svc.settings.config_path or "its configuration"
        # With what it loaded (embedding and sources, their URLs' credentials masked: they went to the admin
        # token's holder as read), from which the CLI tells what differs.
        return error(409, f"the running server loaded {loaded} as it was at start; restart it to use the changed "
                          "configuration, or stop it and run ingest again", loaded=masked(svc.settings.ingest_config()),
                     config_path=svc.settings.config_path)
    try:
        svc.knowledge.ingest_targets(bot=bot, source=source)  # an unknown bot or source is a 404, not a stream
    except KeyError as exc:
        return error(404, f"unknown {exc.args[0]}")
    schedules = loaded_schedules(svc.settings)
    if NDJSON in request.headers.get("accept", ""):
        return StreamingResponse(_progress_lines(svc.knowledge, bot=bot, source=source, schedules=schedules),
                                 media_type=NDJSON)
    warnings: list[dict[str, str]] = []  # what the stream sends as its `warning` lines, in one list
    relaying = relay_to.set(lambda level, message: warnings.append({"warning": message, "level": level}))
    try:
        reports = await svc.knowledge.ingest(bot=bot, source=source, trigger="cli")
    finally:
        relay_to.reset(relaying)
    return JSONResponse({"runs": [r.as_dict() for r in reports], "schedules": schedules, "warnings": warnings})


def loaded_schedules(settings) -> dict[str, str]:
    """"bot/source" -> the cron this server runs it on, as loaded at start: the fingerprint leaves
    schedules out, so the CLI compares them and says when its file now gives another one."""
    return {f"{bot.name}/{source.name}": source.schedule for bot in settings.bots for source in bot.sources}


async def _progress_lines(knowledge, *, bot: str | None, source: str | None,
                          schedules: dict[str, str] | None = None) -> AsyncIterator[str]:
    """`{"progress": {"done", "total", "label"}}` lines while the ingest runs (and `{"warning": "...",
    "level": "warning"}` for each warning or error it logs), then `{"runs": [...], "schedules": {...}}`, or `{"error": "..."}` when the ingest itself
    broke (a source's failure is in its run, not here).

    The ingest runs in a task of its own (`Knowledge.start_ingest`): a CLI that is interrupted stops
    reading, and the run still ends and is recorded, as a scheduled one would be."""
    events: asyncio.Queue[str] = asyncio.Queue()  # the lines to send, progress and warnings in order
    loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()

    def relay(level: str, message: str) -> None:
        line = json.dumps({"warning": message, "level": level}) + "\n"
        if threading.get_ident() == loop_thread:
            events.put_nowait(line)  # in order with the progress lines
        else:  # one of the ingest's worker threads (`asyncio.to_thread`): the queue is the loop's
            loop.call_soon_threadsafe(events.put_nowait, line)

    relaying = relay_to.set(relay)
    try:  # the task copies the context as it is created: its warnings, and only its, come here
        task = knowledge.start_ingest(bot=bot, source=source, trigger="cli",
                                      progress=lambda done, total, label: events.put_nowait(_progress_line(done, total, label)))
    finally:
        relay_to.reset(relaying)
    waiter: asyncio.Future | None = None
    try:
        while not task.done():
            waiter = waiter or asyncio.ensure_future(events.get())
            await asyncio.wait({waiter, task}, timeout=HEARTBEAT_S, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                yield waiter.result()
                waiter = None
            elif not task.done():
                # One page can take minutes (a Crawl-delay, a slow site): the client's read timeout
                # starts again with every line, so it waits as long as the ingest lives.
                yield HEARTBEAT
        if waiter is not None and waiter.done():
            yield waiter.result()
        elif waiter is not None:
            waiter.cancel()  # before it can take one of the last counts from the queue
            waiter = None
        while not events.empty():  # the last counts, queued as the task ended
            yield events.get_nowait()
    finally:
        if waiter is not None:
            waiter.cancel()
    try:
        reports = task.result()
    except Exception as exc:
        # Redacted here: the CLI prints it as it comes, and cannot tell a key only this process knows.
        yield json.dumps({"error": redact(f"the ingest failed: {type(exc).__name__}: {exc}")}) + "\n"
    else:
        yield json.dumps({"runs": [r.as_dict() for r in reports], **({"schedules": schedules} if schedules else {})}) + "\n"


def _progress_line(done: int, total: int, label: str) -> str:
    return json.dumps({"progress": {"done": done, "total": total, "label": label}}) + "\n"
