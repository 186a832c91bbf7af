"""Optional OpenTelemetry tracing: one trace per customer message, webhook → worker → pipeline → send.

Off unless `tracing.otlp_endpoint` is set (an OTLP/HTTP collector, e.g.
`http://otel-collector:4318/v1/traces`); then spans are exported in batches. Why one trace per
message: the webhook only stores the message, and the worker that answers it may run later and in
another process. So the webhook's span context is stored with the message (`meta.traceparent`)
and the worker continues that trace: `message.process` → `pipeline.rewrite` / `pipeline.retrieve` /
`pipeline.answer` → `outbox.send`. Log lines carry the same trace id whether tracing is on or off.

An exception's message and traceback on a span are redacted as the log redacts them (`logs.redact`).

The provider is this module's own (not the global one), so nothing else in the process is traced
by accident and tests can swap the exporter.
"""

from __future__ import annotations

import secrets
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

import structlog
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.observability.logs import redact

_provider: Any = None
_propagator = TraceContextTextMapPropagator()


def configure(*, otlp_endpoint: str | None, service_name: str = "bot-gateway", sample_ratio: float = 1.0,
              exporter: Any = None) -> bool:
    """Turn tracing on (an endpoint, or a test `exporter`) or off (neither); True when on."""
    global _provider
    shutdown()
    if not otlp_endpoint and exporter is None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                              sampler=ParentBased(TraceIdRatioBased(sample_ratio)))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _provider = provider
    return True


def shutdown() -> None:
    """Flush and stop the exporter (at process exit)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


@contextmanager
def span(name: str, *, parent: str | None = None, kind: SpanKind = SpanKind.INTERNAL,
         attributes: dict[str, Any] | None = None) -> Iterator[trace.Span]:
    """A span under the current one, or under `parent` (a W3C traceparent); a no-op when tracing is off.
    An exception marks the span as an error and propagates."""
    tracer = _provider.get_tracer("gateway") if _provider is not None else trace.NoOpTracer()
    context = _propagator.extract({"traceparent": parent}) if parent else None
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes,
                                      record_exception=False, set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            if isinstance(exc, Exception) and current.is_recording():  # as OpenTelemetry's own recording does
                current.record_exception(exc, attributes=_redacted_exception(exc))
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def _redacted_exception(exc: BaseException) -> dict[str, str]:
    """The message and traceback a span's exception event carries, redacted as the log redacts them: an
    exception's text may quote a key (a provider's error), a URL's password (a driver's) or a customer's phone
    number, and the tracing backend keeps it as the log would have."""
    return {"exception.message": redact(str(exc)),
            "exception.stacktrace": redact("".join(traceback.format_exception(exc)))}


def trace_id_of(current: trace.Span) -> str | None:
    """The span's trace id as 32 hex digits, or None for a no-op span."""
    context = current.get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def current_traceparent() -> str:
    """The traceparent to store with a message: the current span's, else one made from the trace id
    the log lines of this request carry (so logs correlate even with tracing off)."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    if "traceparent" in carrier:
        return carrier["traceparent"]
    trace_id = structlog.contextvars.get_contextvars().get("trace_id") or secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"
