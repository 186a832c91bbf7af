"""Request and message context for logs: a trace id per webhook request and per processed message.

OpenTelemetry is optional and not installed in this environment (only `opentelemetry-api`, which
records nothing without an SDK), so tracing here is correlation through structlog context variables:
every log line of a request or of a message's processing carries `trace_id`, and message lines also
carry `message_id` and `conversation_id`. An incoming W3C `traceparent` header is honoured, so a proxy's
trace id shows up in our logs.
"""

from __future__ import annotations

import re
import secrets
import time

import structlog

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def new_trace_id() -> str:
    """A random 128-bit trace id, hex, W3C Trace Context compatible."""
    return secrets.token_hex(16)


def trace_id_from_headers(headers: dict[str, str]) -> str:
    """The trace id of an incoming `traceparent` header, or a new one."""
    match = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
    return match.group(1) if match and match.group(1) != "0" * 32 else new_trace_id()


def bind_message(*, message_id: int, conversation_id: int, bot: str, channel: str) -> str:
    """Bind a message's ids (and a fresh trace id) to every log line of the current task."""
    trace_id = new_trace_id()
    structlog.contextvars.bind_contextvars(trace_id=trace_id, message_id=message_id,
                                           conversation_id=conversation_id, bot=bot, channel=channel)
    return trace_id


def unbind_message() -> None:
    """Drop the message context bound by `bind_message`."""
    structlog.contextvars.unbind_contextvars("trace_id", "message_id", "conversation_id", "bot", "channel")


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
        trace_id = trace_id_from_headers(headers)
        started = time.monotonic()
        is_webhook = scope.get("path", "").startswith("/webhooks/")

        async def send_with_trace(message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      (b"traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-01".encode())]
                if is_webhook and self.metrics is not None:
                    self.metrics.observe_stage("ack", time.monotonic() - started)
            await send(message)

        with structlog.contextvars.bound_contextvars(trace_id=trace_id):
            await self.app(scope, receive, send_with_trace)
