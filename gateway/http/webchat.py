"""The web chat API and widget: list bots, chat (JSON or SSE), read a session's transcript."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import select
from sse_starlette.sse import EventSourceResponse

from gateway.events import message_topic
from gateway.http.client_address import client_address
from gateway.http.deps import AfterId, error, services, utc_iso
from gateway.http.json_body import JsonRoute
from gateway.inbox import storable
from gateway.models import (
    CHANNELS,
    CLIENT_ID,
    CLIENT_ID_RULE,
    ConversationRef,
    InboundMessage,
    Sender,
    is_blank,
    weak_session_id,
)
from gateway.settings import BotSettings
from storage import repositories as repo
from storage.models import Conversation, Message

log = structlog.get_logger("gateway.webchat")
router = APIRouter(tags=["web chat"], route_class=JsonRoute)  # bodies capped before parsing, JSON by default
STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
MAX_DELIVERY_ID = 255  # messages.external_id is a VARCHAR(255) on PostgreSQL
STORE_RECHECK_FIRST_S, STORE_RECHECK_MAX_S = 0.5, 4.0  # wait_for_reply's reads of the store, besides its events
STOP_CHECK_S = 0.5  # how soon a waiting request sees the server stopping
STREAM_SHUTDOWN_GRACE_S = 2.0
"""How long an open stream has, once the server stops, to end with its `done` event (`pending`). Why:
sse-starlette cancels every open stream at once on shutdown, which cut the body before `done`. Shorter
than the server's own wait for open requests (gateway.cli.GRACEFUL_SHUTDOWN_S)."""


class ChatRequest(BaseModel):
    """A web chat message. `message_id` makes a retried POST idempotent."""

    session_id: str = Field(max_length=128)
    text: str
    message_id: str | None = None  # checked against CLIENT_ID by the route, with a message that says why


def _delivery_id(body: ChatRequest) -> str:
    """The inbound message's dedupe key: `message_id` within its session. Why the session: ids such as
    "1", "2" are only unique per visitor, and a repeated id must never return another session's reply."""
    # "/" is not allowed in a session id, so the first one ends it: no two pairs make the same key.
    if not body.message_id:
        return uuid.uuid4().hex
    key = f"{body.session_id}/{body.message_id}"
    if len(key) > MAX_DELIVERY_ID:  # both at their 128-character limit: 257, over the column's 255
        key = f"{body.session_id}/sha256:{hashlib.sha256(body.message_id.encode()).hexdigest()}"
    return key


@router.get("/", include_in_schema=False)
async def widget() -> FileResponse:
    """The chat widget."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def _enabled(channel: Any) -> bool:
    """Whether a bot's channel runs: written in its config and not `enabled: false` (which has no adapter)."""
    return channel is not None and channel.enabled


def _has_web_chat(bot: BotSettings) -> bool:
    """Whether `bot` has its web chat on: the bots GET /v1/bots lists, the only ones a chat may name."""
    return _enabled(bot.channels.web)


@router.get("/v1/bots")
async def list_bots(request: Request, response: Response) -> dict[str, Any]:
    """The bots that have the web chat enabled. The `Gateway-Reply-Timeout` header gives
    `worker.reply_timeout` (seconds a chat request waits for its answer), so the widget knows when a
    request that has not ended is lost."""
    svc = services(request)
    response.headers["Gateway-Reply-Timeout"] = f"{svc.reply_timeout:g}"
    return {"bots": [{"name": b.name, "channels": [c for c in CHANNELS if _enabled(getattr(b.channels, c))],
                      # The widget's words (`replies.widget`) and their language (`replies.lang`).
                      "texts": b.replies.widget.model_dump(), "lang": b.replies.lang}
                     for b in svc.settings.bots if _has_web_chat(b)]}


def _without_web_chat(request: Request, bot: str) -> JSONResponse | None:
    """404 for an unknown bot or one whose web chat is off: its chat and its transcripts alike."""
    try:
        settings = services(request).settings.bot(bot)
    except KeyError:  # a typo in a URL: the names are those GET /v1/bots gives anyone
        names = [b.name for b in services(request).settings.bots if _has_web_chat(b)]
        return error(404, f"unknown bot {bot!r}; the bots with a web chat: {', '.join(names) or 'none'} (GET /v1/bots)")
    if not _has_web_chat(settings):
        return error(404, f"bot {bot!r} has no web chat")
    return None


CROSS_SITE = frozenset({"cross-site", "same-site"})
"""`Sec-Fetch-Site` of a browser request a page of another origin sent. Why refused: a body without a type is
read as JSON, and `fetch(url, {mode: "no-cors", body: blob})` sends one with no type and no CORS preflight, so
any site could make its visitors' browsers write to the bot (each with its own per-address budget). The widget
posts from its own origin (framed or not), and a client that is no browser page sends no such header."""


def _from_another_site(request: Request) -> bool:
    """Whether a browser sent this request from a page of another origin. `Sec-Fetch-Site` says so where the
    browser sends it; it sends none to a plain-http origin other than loopback (a gateway on a LAN address), nor
    does Safari before 16.4 (2023), so then `Origin`, which every browser sends with a cross-origin POST, is
    compared with the host the request was sent to (`Host`, or a proxy's `X-Forwarded-Host`: a page cannot set
    either). No `Origin` either: no browser page's cross-origin request (a backend, curl)."""
    site = request.headers.get("sec-fetch-site", "").strip().lower()
    if site:
        return site in CROSS_SITE
    origin = request.headers.get("origin")
    if origin is None:
        return False
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return True  # "null": a sandboxed or opaque page
    hosts = [request.headers.get("host", ""), *request.headers.get("x-forwarded-host", "").split(",")]
    return parts.netloc.lower() not in {_without_default_port(host) for host in hosts if host.strip()}


def _without_default_port(host: str) -> str:
    """A Host header as an Origin writes it: lower case, without the scheme's default port (`:443`, `:80`)."""
    host = host.strip().lower()
    return host.rsplit(":", 1)[0] if host.endswith((":443", ":80")) else host


def _validate(request: Request, bot: str, body: ChatRequest) -> JSONResponse | None:
    if _from_another_site(request):
        return error(403, "a page of another site cannot post to the web chat; embed the widget in an <iframe> "
                          "(README: Embedding it in your site). Behind a proxy, pass on the Host header (nginx: "
                          "proxy_set_header Host $http_host;)")
    if (refused := _without_web_chat(request, bot)) is not None:
        return refused
    settings = services(request).settings.bot(bot)
    if (refused := _bad_session_id(settings, body.session_id)) is not None:
        return refused
    # As for an operator's reply: an id is a dedupe key, and "" or "bad id!" were stored as one.
    if body.message_id is not None and not CLIENT_ID.fullmatch(body.message_id):
        return error(422, f"message_id must be {CLIENT_ID_RULE}")
    if is_blank(body.text):  # zero-width characters alone too: nothing to answer
        return error(422, "text is empty")
    limit = settings.channels.web.max_message_chars
    if len(body.text) > limit:
        return error(413, settings.replies.web_too_long.format(chars=len(body.text), limit=limit), limit=limit)
    if "\x00" in body.text:
        return error(422, "text contains a NUL byte")
    return None


def _bad_session_id(settings: BotSettings, session_id: str) -> JSONResponse | None:
    """422 for a session id that is malformed, or short or plain enough to guess (`min_session_id_length`)."""
    if not CLIENT_ID.fullmatch(session_id):
        return error(422, f"session_id must be {CLIENT_ID_RULE}")
    if (weak := weak_session_id(session_id, settings.channels.web.session_id_min_length)) is not None:
        return error(422, weak)
    return None


async def _over_address_limit(request: Request, bot: str, body: ChatRequest) -> JSONResponse | None:
    """429 (nothing stored) once the client's address passed the bot's `per_address_per_minute`. A
    retry of a message already stored (same `message_id`) is not counted here: it adds nothing, and this
    429 would tell the widget "not stored" about a message that will be answered. It is a read of the answer
    instead (`_over_read_limit`), whose 429 says `"stored": true`."""
    svc = services(request)
    settings = svc.settings.bot(bot)
    per_minute = settings.channels.web.per_address_per_minute
    if svc.rate_limiter is None or request.client is None:
        return None
    if body.message_id and await _stored(svc, bot, _delivery_id(body)):  # it waits for its answer: a read
        return await _over_read_limit(request, bot, body.session_id, stored=True)
    if not per_minute:
        return None
    try:
        allowed = await svc.rate_limiter.allow_address(bot=bot, address=client_address(request),
                                                       per_minute=per_minute)
    except Exception:  # the limiter's store being down must not stop the chat: fail open
        log.exception("ratelimit.address_check_failed", bot=bot)
        return None
    if allowed:
        return None
    svc.metrics.rate_limited.labels(bot=bot, scope="address").inc()
    response = error(429, settings.replies.web_rate_limited.format(per_minute=per_minute))
    response.headers["Retry-After"] = "60"
    return response


async def _over_read_limit(request: Request, bot: str, session_id: str, *, stored: bool = False) -> JSONResponse | None:
    """429 with `Retry-After` once a session, or a client address, read its answers (transcript GETs, retries of a
    stored `message_id`, each of which waits for its answer) more often than the bot's `transcript_per_*`
    limits allow. `"stored": true` on a retry's 429: the message is kept, and its answer comes by the transcript."""
    svc = services(request)
    web = svc.settings.bot(bot).channels.web
    per_session, per_address = web.transcript_per_session_per_minute, web.transcript_per_address_per_minute
    if not (per_session or per_address) or svc.rate_limiter is None or request.client is None:
        return None
    # The counter's key holds no session id: one is a bearer secret, and a Redis dump would give them away.
    session_key = hashlib.sha256(session_id.encode()).hexdigest()[:32]
    wait = await svc.rate_limiter.allow_read(bot=bot, session=session_key, address=client_address(request),
                                             per_session=per_session, per_address=per_address)
    if wait is None:
        return None
    svc.metrics.rate_limited.labels(bot=bot, scope="transcript").inc()
    seconds = math.ceil(wait)
    response = error(429, f"this conversation was read too often in the last minute; try again in {seconds} s",
                     **({"stored": True} if stored else {}))
    response.headers["Retry-After"] = str(seconds)
    return response


async def _text_of(svc, message_id: int) -> str | None:
    async with svc.sessions() as session:
        return (await session.execute(select(Message.text).where(Message.id == message_id))).scalar_one_or_none()


async def _stored(svc, bot: str, external_id: str) -> bool:
    async with svc.sessions() as session:
        return (await session.execute(select(Message.id).where(
            Message.bot == bot, Message.channel == "web", Message.direction == "in",
            Message.external_id == external_id).limit(1))).scalar_one_or_none() is not None


@router.post("/v1/bots/{bot}/chat")
async def chat(bot: str, body: ChatRequest, request: Request):
    """Store the message, wait for the worker's answer, and return it (or stream it as SSE)."""
    refused = _validate(request, bot, body) or await _over_address_limit(request, bot, body)
    if refused is not None:
        return refused
    svc = services(request)
    message = InboundMessage(
        channel="web", external_id=_delivery_id(body),
        conversation=ConversationRef(channel="web", chat=body.session_id),
        sender=Sender(external_id=body.session_id, display_name="Web visitor"), text=body.text,
    )
    accepted = await svc.inbox.accept(bot, message)
    if accepted is None:  # a retry of a message `gateway forget` deleted since: its reply went with it
        return error(409, f"message_id {body.message_id!r} was used for a message since deleted (gateway forget); "
                          "send it again with a new message_id")
    if accepted.duplicate and await _text_of(svc, accepted.message_id) != storable(message).text:
        # A retry repeats its text; another text under a used id is a client bug, and answering it with
        # the first message's reply would drop this message without anyone seeing it.
        return error(409, f"message_id {body.message_id!r} was already used for another message in this session; "
                          "send this one with a new message_id")
    svc.metrics.message_in(bot=bot, channel="web", duplicate=accepted.duplicate)
    if "text/event-stream" in request.headers.get("accept", ""):
        shutdown = anyio.Event()  # set by sse-starlette when the server is told to stop
        return EventSourceResponse(_stream(svc, accepted.message_id, shutdown=shutdown), ping=15,
                                   shutdown_event=shutdown, shutdown_grace_period=STREAM_SHUTDOWN_GRACE_S)
    result = await wait_for_reply(svc, accepted.message_id, timeout=svc.reply_timeout)
    return JSONResponse(result, status_code=200 if not result.get("pending") else 202)


async def _stream(svc, message_id: int, *, shutdown: anyio.Event):
    # Events first, the store only when none came for a while (an answer whose event never came here), as
    # wait_for_reply reads it: reading the status before each event cost a query per token, and once the
    # answer was stored the tokens still queued were dropped.
    async with svc.bus.subscribe(message_topic(message_id)) as queue:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + svc.reply_timeout
        recheck = STORE_RECHECK_FIRST_S
        next_read = loop.time() + recheck
        finished = await _status(svc, message_id) not in ("pending", None)
        while not finished:
            remaining = deadline - loop.time()
            if remaining <= 0 or svc.stopping.is_set() or shutdown.is_set():
                break
            try:
                event = await asyncio.wait_for(queue.get(), timeout=min(STOP_CHECK_S, remaining))
            except asyncio.TimeoutError:
                if loop.time() >= next_read:
                    finished = await _status(svc, message_id) not in ("pending", None)
                    recheck = min(recheck * 2, STORE_RECHECK_MAX_S)
                    next_read = loop.time() + recheck
                continue
            if event.get("type") == "token":
                yield {"event": "token", "data": json.dumps({"text": event["text"]})}
            elif event.get("type") == "reset":  # another attempt starts over: the tokens so far are void
                yield {"event": "reset", "data": "{}"}
            elif event.get("type") == "done":
                break
    yield {"event": "done", "data": json.dumps(await _reply_for(svc, message_id))}


async def wait_for_reply(svc, message_id: int, *, timeout: float) -> dict[str, Any]:
    """The reply to `message_id` once it is settled (or at `timeout`, still pending), as the web chat
    returns it. Waits on the bus, whose `done` event (LISTEN/NOTIFY carries it across replicas) wakes it at
    once, and reads the store now and then too, for an answer whose event never came here: every
    STORE_RECHECK_FIRST_S at first, twice as long each time up to STORE_RECHECK_MAX_S. Why not every 0.5 s:
    each waiting request (a slow answer's, each retry of it) read the database twice a second."""
    async with svc.bus.subscribe(message_topic(message_id)) as queue:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        recheck = STORE_RECHECK_FIRST_S
        while await _status(svc, message_id) == "pending":
            next_read = min(deadline, loop.time() + recheck)
            recheck = min(recheck * 2, STORE_RECHECK_MAX_S)
            while (remaining := next_read - loop.time()) > 0 and not svc.stopping.is_set():
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=min(remaining, STOP_CHECK_S))
                except asyncio.TimeoutError:
                    continue
                if event.get("type") == "done":
                    break
            if loop.time() >= deadline or svc.stopping.is_set():  # shutting down: `pending`, not a cut-off 500
                break
    return await _reply_for(svc, message_id)


async def _status(svc, message_id: int) -> str | None:
    async with svc.sessions() as session:
        return (await session.execute(select(Message.status).where(Message.id == message_id))).scalar_one_or_none()


async def _reply_for(svc, message_id: int) -> dict[str, Any]:
    async with svc.sessions() as session:
        inbound = await session.get(Message, message_id)
        conversation = await session.get(Conversation, inbound.conversation_id)
        replies = (await session.execute(
            select(Message).where(Message.reply_to_id == message_id, Message.direction == "out")
            .order_by(Message.id))).scalars().all()
    bot_replies = [r for r in replies if r.author in ("bot", "system")]
    citations: list[dict[str, Any]] = []
    for reply in bot_replies:
        for citation in reply.citations or []:
            if citation not in citations:
                citations.append(citation)
    body: dict[str, Any] = {
        "reply": "\n\n".join(r.text for r in bot_replies) if bot_replies else None,
        "citations": citations,
        # What the widget shows over the citations: the bot's `replies.sources_heading`.
        "sources_heading": svc.settings.bot(inbound.bot).replies.sources_heading,
        "conversation_id": conversation.id,
        "state": conversation.state,
        "message_id": message_id,
    }
    if inbound.status == "pending":
        body["pending"] = True
    return body


@router.get("/v1/bots/{bot}/sessions/{session_id}/messages")
async def session_messages(bot: str, session_id: str, request: Request, after: AfterId = 0) -> JSONResponse:
    """The session's transcript after message `after`, operator replies included. None of a bot whose
    web chat is off: turning it off (a leaked session id, a retired widget) closes its transcripts too."""
    svc = services(request)
    if (refused := _without_web_chat(request, bot)) is not None:
        return refused
    settings = svc.settings.bot(bot)
    heading = settings.replies.sources_heading
    # A session kept from before the rule (or from a lower `min_session_id_length`) is closed too: guessable.
    if (refused := _bad_session_id(settings, session_id) or await _over_read_limit(request, bot, session_id)) is not None:
        return refused
    async with svc.sessions() as session:
        conversation = await repo.find_conversation(session, bot=bot, ref=ConversationRef(channel="web", chat=session_id))
        if conversation is None:
            return JSONResponse({"messages": [], "conversation_id": None, "state": "bot", "sources_heading": heading})
        rows = await repo.transcript(session, conversation_id=conversation.id, after_id=after)
    return JSONResponse({
        "conversation_id": conversation.id,
        "state": conversation.state,
        "sources_heading": heading,
        "messages": [{
            "id": m.id, "direction": m.direction, "author": m.author, "text": m.text,
            "citations": m.citations or [], "status": m.status, "created_at": utc_iso(m.created_at),
        } for m in rows if m.status != "ignored"],
    })
