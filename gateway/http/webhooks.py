"""Platform webhooks: verify → parse → store in the inbox → acknowledge at once.

Nothing is stored unless the signature verifies. The body is read with a size cap, so an
oversized request is refused before it is read whole, and a deadline, so a client trickling it in a
byte at a time does not hold its connection (and the memory of what it sent) for ever. A payload we cannot use gets 400, which a retry
would not change: Slack, which retries any non-2xx, is told so with `X-Slack-No-Retry: 1`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from channels.base import DispatchingAdapter, RawRequest
from gateway.delivery.receipts import record_receipt
from gateway.errors import BadRequest, SignatureInvalid
from gateway.http.deps import error, services
from gateway.inbox import ID_MAX_CHARS, overlong_id
from storage.conflicts import run_again_on_conflict

log = structlog.get_logger("gateway.webhooks")
router = APIRouter(tags=["webhooks"])

MAX_BODY_BYTES = 1_000_000
# A store left going after the platform's response, run again after each of these pauses while it fails.
LATE_STORE_RETRIES_S = (1.0, 5.0, 30.0)
BODY_DEADLINE_S = 30.0  # a platform posts its few kilobytes at once; only a slow-loris client needs longer
ERROR_CODE_MAX_CHARS = 64  # deliveries.error_code and early_receipts.error_code: Twilio's are five digits
CHANNEL_PATHS = {
    "telegram": "telegram",
    "slack/events": "slack",
    "whatsapp": "whatsapp",
    "discord/interactions": "discord",
}


class BodyTooLarge(Exception):
    """The request body passed MAX_BODY_BYTES."""


class BodyTooSlow(Exception):
    """The request body did not arrive whole within BODY_DEADLINE_S."""


async def read_capped(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read the body, refusing it as soon as it passes `limit` bytes or BODY_DEADLINE_S."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_DEADLINE_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge()
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTooSlow() from None
    return b"".join(chunks)


class CappedRequest(Request):
    """A request whose body is read through `read_capped`, so FastAPI's own body parsing is capped too."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            self._body = await read_capped(self)
        return self._body


class CappedRoute(APIRoute):
    """Route class for JSON APIs: a body over MAX_BODY_BYTES gets 413 before it is read whole."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def capped(request: Request) -> Response:
            request = CappedRequest(request.scope, request.receive)
            if isinstance(refused := await body_or_refusal(request.body()), Response):
                return refused
            return await handler(request)

        return capped


async def body_or_refusal(reading: Awaitable[bytes]) -> bytes | Response:
    """The body `reading` (a `read_capped`) gives, or the answer that refuses it: 413 past MAX_BODY_BYTES, 408
    (logged as `http.body_too_slow`) past BODY_DEADLINE_S."""
    try:
        return await reading
    except BodyTooLarge:
        return error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    except BodyTooSlow:
        log.warning("http.body_too_slow", deadline_s=BODY_DEADLINE_S)
        return error(408, f"body not received within {BODY_DEADLINE_S:g} s")


def log_signature_invalid(svc, bound, prefix: str, key: tuple[str, str], *, reason: str) -> None:
    """`<prefix>.signature_invalid` for the first few of a run, then `<prefix>.signature_invalid_repeated`
    with how many were left out, once a minute: a loop of bad POSTs logged a line each. The metric
    `gateway_signature_failures_total` still counts every one."""
    log_it, left_out = svc.signature_log.seen(key)
    if left_out:
        bound.warning(f"{prefix}.signature_invalid_repeated", count=left_out,
                      period_s=svc.signature_log.every_s)
    if log_it:
        bound.warning(f"{prefix}.signature_invalid", reason=reason)


@router.post("/webhooks/{bot}/{channel_path:path}")
async def webhook(bot: str, channel_path: str, request: Request) -> Response:
    """The one webhook endpoint for every platform."""
    svc = services(request)
    channel = CHANNEL_PATHS.get(channel_path)
    if channel is None:
        return error(404, f"no webhook at {channel_path!r}")
    adapter = svc.adapters.get((bot, channel))
    if adapter is None:
        return error(404, f"bot {bot!r} has no {channel} channel")
    if isinstance(body := await body_or_refusal(read_capped(request)), Response):
        return body
    raw = RawRequest(url=str(request.url), headers={k.lower(): v for k, v in request.headers.items()},
                     query=dict(request.query_params), body=body)
    bound = log.bind(bot=bot, channel=channel)
    try:
        adapter.verify(raw)
    except SignatureInvalid as exc:
        svc.metrics.signature_failures.labels(bot=bot, channel=channel).inc()
        log_signature_invalid(svc, bound, "webhook", (bot, channel), reason=str(exc))
        return error(401, "invalid signature")
    try:
        result = await adapter.dispatch(raw) if isinstance(adapter, DispatchingAdapter) else adapter.parse(raw)
    except BadRequest as exc:
        bound.warning("webhook.bad_request", reason=str(exc))
        return _unusable(channel, str(exc))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
        # Signed, so from the platform (or whoever holds the secret), but not in a shape its adapter
        # knows ("message": "hello", a date out of range): a clear 400, not a 500 it would retry.
        bound.warning("webhook.unexpected_shape", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return _unusable(channel, f"unexpected {channel} payload: {type(exc).__name__}")
    # A Slack retry (X-Slack-Retry-Num / -Reason) on every line logged for this delivery (inbound.stored,
    # inbound.duplicate, webhook.ignored…), so an operator following a message sees Slack sent it again.
    retry = {key: result.extra[key] for key in ("retry_num", "retry_reason") if result.extra.get(key)}
    with structlog.contextvars.bound_contextvars(**retry):
        return await _handle(svc, bound, bot, channel, result)


async def _handle(svc, bound, bot: str, channel: str, result) -> Response:
    """Check, log and store a parsed delivery; the platform's response."""
    malformed = next((problem for m in result.messages if (problem := _malformed(m))), None) or next(
        (problem for u in result.status_updates if (problem := _malformed_receipt(u))), None)
    if malformed:
        bound.warning("webhook.unexpected_shape", error=malformed)
        return _unusable(channel, f"unexpected {channel} payload: {malformed}")
    for reason in result.ignored:
        bound.info("webhook.ignored", reason=reason)
    if result.respond_within is None:
        await _store(svc, bot, channel, result.messages)
    else:
        await _store_in_time(svc, bound, bot, channel, result)
    for update_ in result.status_updates:
        # Each step is idempotent (a status only moves up): one aborted for a deadlock runs again.
        await run_again_on_conflict(lambda u=update_: record_receipt(
            svc.sessions, bot=bot, channel=channel, provider_id=u.provider_message_id, status=u.status,
            error_code=u.error_code), what="receipt")
    if result.response is not None:
        return Response(result.response.body, status_code=result.response.status,
                        media_type=result.response.content_type)
    return JSONResponse({"ok": True})


async def _store(svc, bot: str, channel: str, messages) -> None:
    for message in messages:
        accepted = await svc.inbox.accept(bot, message)  # the inbox makes it storable
        if accepted is not None:  # None: logged as inbound.ignored, with its reason
            svc.metrics.message_in(bot=bot, channel=channel, duplicate=accepted.duplicate)


async def _store_in_time(svc, bound, bot: str, channel: str, result) -> None:
    """Store `result`'s messages, waiting `result.respond_within` seconds at most: the platform gives up on
    the response after that and never asks again, so a slow database must not cost the response. A store
    still going then goes on in the background (`Services.late_stores`, waited for at stop): the platform
    sends no retry that could store it twice, and a crash meanwhile loses no more than a missed response
    would have (the question was lost with it too). Logged as `webhook.store_slow`; a late store that fails
    is run again (`LATE_STORE_RETRIES_S`, logged as `webhook.store_retry`: nothing else would, and storing is
    idempotent), and one that fails each time is logged as `webhook.store_failed`, its sender then told so
    (`WebhookResult.if_not_stored`)."""
    task = asyncio.ensure_future(_store(svc, bot, channel, result.messages))
    _keep(svc, task)
    done, _ = await asyncio.wait({task}, timeout=result.respond_within)
    if done:
        task.result()  # a failure is the request's, as when stored in line
        return
    ids = [m.external_id for m in result.messages]
    bound.warning("webhook.store_slow", waited_s=result.respond_within, external_ids=ids)
    _keep(svc, asyncio.ensure_future(_store_late(svc, bound, bot, channel, result, task, ids)))


def _keep(svc, task: asyncio.Task) -> None:
    svc.late_stores.add(task)
    task.add_done_callback(svc.late_stores.discard)


async def _store_late(svc, bound, bot: str, channel: str, result, first: asyncio.Task, ids: list[str]) -> None:
    """`first` (the store the response did not wait for) to its end, run again while it fails: the platform got
    its answer (a Discord "thinking…") and sends the question no more, so a database away a moment lost it.
    One that fails each time, or that a stop gives up on (`LATE_STORE_STOP_S`), is said to its sender
    (`if_not_stored`), as no answer will come."""
    try:
        for attempt, pause in enumerate((*LATE_STORE_RETRIES_S, None), start=1):
            try:
                await (first if attempt == 1 else _store(svc, bot, channel, result.messages))
                return
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                if pause is None:
                    break
                bound.warning("webhook.store_retry", external_ids=ids, error=error, attempt=attempt,
                              retry_in_s=pause)
                await asyncio.sleep(pause)
        bound.error("webhook.store_failed", external_ids=ids, error=error, attempts=attempt)
    except asyncio.CancelledError:  # a stop that waited its bound: the transaction is rolled back
        bound.error("webhook.store_failed", external_ids=ids, error="cancelled: the gateway stopped",
                    attempts=attempt)
        await _say_not_stored(result)
        raise
    await _say_not_stored(result)


async def _say_not_stored(result) -> None:
    if result.if_not_stored is not None:  # this task is waited for at stop, and so is the notice
        await result.if_not_stored()


def _unusable(channel: str, detail: str) -> Response:
    """400 for a verified payload we cannot use; Slack would otherwise send it three more times."""
    response = error(400, detail)
    if channel == "slack":
        response.headers["X-Slack-No-Retry"] = "1"
    return response


def _malformed(message) -> str | None:
    """What is not text in a parsed message that must be (`"text": 12345` parses, then fails to store), or
    an id longer than the store holds."""
    fields = {"text": message.text, "id": message.external_id, "sender": message.sender.external_id,
              "chat": message.conversation.chat, "thread": message.conversation.thread,
              "workspace": message.conversation.workspace, "reply_to": message.reply_to}
    wrong_type = next((f"{name} is {type(value).__name__}, not text" for name, value in fields.items()
                       if not isinstance(value, str) and not (name == "reply_to" and value is None)), None)
    return wrong_type or overlong_id(message)  # a 300-character chat id: a 500 on PostgreSQL, retried for ever


def _malformed_receipt(update) -> str | None:
    """A delivery receipt's message id or error code longer than the store holds (Twilio's are 34 characters
    and five digits): stored, one failed the insert on PostgreSQL with a 500 that Twilio retried."""
    return next((f"{name} is {len(value)} characters, longer than the {limit} the store holds"
                 for name, value, limit in (("message id", update.provider_message_id, ID_MAX_CHARS),
                                            ("error_code", update.error_code, ERROR_CODE_MAX_CHARS))
                 if isinstance(value, str) and len(value) > limit), None)
