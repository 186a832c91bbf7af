"""Platform webhooks: verify → parse → store in the inbox → acknowledge at once.

Nothing is stored unless the signature verifies. The body is read with a size cap, so an
oversized request is refused before it is read whole.
"""

from __future__ import annotations


import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sqlalchemy import select, update

from channels.base import RawRequest
from gateway.errors import BadRequest, SignatureInvalid
from gateway.http.deps import error, services
from gateway.inbox import without_nul
from gateway.models import utcnow
from storage.models import Delivery, Message

log = structlog.get_logger("gateway.webhooks")
router = APIRouter(tags=["webhooks"])

MAX_BODY_BYTES = 1_000_000
CHANNEL_PATHS = {
    "telegram": "telegram",
    "slack/events": "slack",
    "whatsapp": "whatsapp",
    "discord/interactions": "discord",
}


class BodyTooLarge(Exception):
    """The request body passed MAX_BODY_BYTES."""


async def read_capped(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read the body, refusing it as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
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
            try:
                await request.body()
            except BodyTooLarge:
                return error(413, f"body larger than {MAX_BODY_BYTES} bytes")
            return await handler(request)

        return capped


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
    try:
        body = await read_capped(request)
    except BodyTooLarge:
        return error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    raw = RawRequest(url=str(request.url), headers={k.lower(): v for k, v in request.headers.items()},
                     query=dict(request.query_params), body=body)
    bound = log.bind(bot=bot, channel=channel)
    try:
        adapter.verify(raw)
    except SignatureInvalid as exc:
        svc.metrics.signature_failures.labels(bot=bot, channel=channel).inc()
        bound.warning("webhook.signature_invalid", reason=str(exc))
        return error(401, "invalid signature")
    try:
        result = adapter.parse(raw)
    except BadRequest as exc:
        bound.warning("webhook.bad_request", reason=str(exc))
        return error(400, str(exc))
    for reason in result.ignored:
        bound.info("webhook.ignored", reason=reason)
    for message in result.messages:
        accepted = await svc.inbox.accept(bot, without_nul(message))
        counter = svc.metrics.duplicates if accepted.duplicate else svc.metrics.messages_in
        counter.labels(bot=bot, channel=channel).inc()
    for update_ in result.status_updates:
        await _apply_status(svc, bot=bot, channel=channel, update_=update_)
    if result.response is not None:
        return Response(result.response.body, status_code=result.response.status,
                        media_type=result.response.content_type)
    return JSONResponse({"ok": True})


# Receipts can arrive out of order (a late "sent" after "delivered"): a status only ever moves up.
STATUS_RANK = {"pending": 0, "sending": 0, "sent": 1, "delivered": 2, "read": 3, "failed": 3}


def _overall(statuses: list[str]) -> str:
    """A split reply's status: failed if any part failed, else its least advanced part."""
    if "failed" in statuses:
        return "failed"
    return min(statuses, key=lambda s: STATUS_RANK.get(s, 0))


async def _apply_status(svc, *, bot: str, channel: str, update_) -> None:
    """Record a delivery receipt on the reply part that carries this provider id, then on the reply."""
    async with svc.sessions() as session, session.begin():
        delivery = (await session.execute(select(Delivery).where(
            Delivery.channel == channel, Delivery.provider_id == update_.provider_message_id)
            .with_for_update())).scalar_one_or_none()  # two receipts for one part must not interleave
        if delivery is None:
            log.info("outbound.status_unmatched", bot=bot, provider_message_id=update_.provider_message_id)
            return
        if STATUS_RANK.get(update_.status, 0) <= STATUS_RANK.get(delivery.status, 0):
            log.info("outbound.status_stale", bot=bot, message_id=delivery.message_id, status=update_.status,
                     current=delivery.status)
            return
        delivery.status = update_.status
        delivery.error_code = update_.error_code
        await session.flush()
        parts = (await session.execute(select(Delivery.status).where(
            Delivery.message_id == delivery.message_id))).scalars().all()
        values = {"status": _overall(list(parts)), "updated_at": utcnow()}
        if update_.error_code:
            values["error"] = f"provider error {update_.error_code}"
        await session.execute(update(Message).where(Message.id == delivery.message_id).values(**values))
    log.info("outbound.status", bot=bot, message_id=delivery.message_id, status=update_.status,
             error_code=update_.error_code)
