"""Request and message context for logs: a trace id per webhook request and per processed message.

Every log line of a request or of a message's processing carries `trace_id`, and message lines also
carry `message_id` and `conversation_id`. An incoming W3C `traceparent` header is honoured, so a proxy's
trace id shows up in our logs. The worker reuses the trace id of the request that stored the message.
With `tracing.otlp_endpoint` set, the same ids are real OpenTelemetry spans (`gateway/observability/otel.py`).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

import structlog
from opentelemetry.trace import SpanKind

from gateway.observability import otel
from gateway.observability.logs import without_session_ids
from gateway.observability.metrics import UNMATCHED_ROUTE, route_template

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def new_trace_id() -> str:
    """A random 128-bit trace id, hex, W3C Trace Context compatible."""
    return secrets.token_hex(16)


def trace_id_from_headers(headers: dict[str, str]) -> str:
    """The trace id of an incoming `traceparent` header, or a new one."""
    return trace_id_of_traceparent(headers.get("traceparent")) or new_trace_id()


def trace_id_of_traceparent(traceparent: str | None) -> str | None:
    """The trace id inside a W3C traceparent, or None."""
    match = _TRACEPARENT.match((traceparent or "").strip().lower())
    return match.group(1) if match and match.group(1) != "0" * 32 else None


def bind_message(*, message_id: int, conversation_id: int, bot: str, channel: str, trace_id: str | None = None) -> str:
    """Bind a message's ids and its trace id (the webhook's, when known; else a fresh one) to every log
    line of the current task."""
    trace_id = trace_id or new_trace_id()
    structlog.contextvars.bind_contextvars(trace_id=trace_id, message_id=message_id,
                                           conversation_id=conversation_id, bot=bot, channel=channel)
    return trace_id


def unbind_message() -> None:
    """Drop the message context bound by `bind_message`."""
    structlog.contextvars.unbind_contextvars("trace_id", "message_id", "conversation_id", "bot", "channel")


@contextmanager
def message_context(*, message_id: int, conversation_id: int, bot: str, channel: str,
                    traceparent: str | None) -> Iterator[None]:
    """Processing one message: the `message.process` span, continuing the trace of the request that stored
    it (`traceparent`), and the same ids on every log line meanwhile."""
    with otel.span("message.process", parent=traceparent, kind=SpanKind.CONSUMER, attributes={
            "gateway.message_id": message_id, "gateway.conversation_id": conversation_id,
            "gateway.bot": bot, "gateway.channel": channel}) as span:
        bind_message(message_id=message_id, conversation_id=conversation_id, bot=bot, channel=channel,
                     trace_id=otel.trace_id_of(span) or trace_id_of_traceparent(traceparent))
        try:
            yield
        finally:
            unbind_message()


class RequestContextMiddleware:
    """Pure ASGI middleware: a trace id per request in the logs (and `traceparent` back), and the
    acknowledgement latency of webhooks as the `ack` stage."""

    def __init__(self, app, *, metrics=None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        started = time.monotonic()
        path = scope.get("path", "")
        is_webhook = path.startswith("/webhooks/")
        method = scope.get("method", "GET")
        with otel.span(method, parent=headers.get("traceparent"), kind=SpanKind.SERVER,
                       attributes={"http.request.method": method, "url.path": without_session_ids(path)}) as span:
            trace_id = otel.trace_id_of(span) or trace_id_from_headers(headers)
            span_id = format(span.get_span_context().span_id, "016x") if otel.trace_id_of(span) else secrets.token_hex(8)

            async def send_with_trace(message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message.get("status", 0))
                    message.setdefault("headers", [])
                    message["headers"] = [*message["headers"], (b"traceparent", f"00-{trace_id}-{span_id}-01".encode())]
                    if is_webhook and self.metrics is not None:
                        self.metrics.observe_stage("ack", time.monotonic() - started)
                await send(message)

            with structlog.contextvars.bound_contextvars(trace_id=trace_id):
                try:
                    await self.app(scope, receive, send_with_trace)
                finally:
                    # Named by the route's template once routed, as OpenTelemetry asks: named by the raw
                    # path, every session id and escalation id made a span name of its own.
                    route = route_template(scope)
                    if route != UNMATCHED_ROUTE:
                        span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}" if route != UNMATCHED_ROUTE else method)
