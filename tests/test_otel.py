"""OpenTelemetry through the real app: one trace per message, from the request that stored it, through
the worker and the pipeline steps, to the send; off (no-op) unless configured."""

from __future__ import annotations

import asyncio
import http.server
import threading

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import create_app
from gateway.observability import otel
from gateway.observability.logs import configure_logging
from gateway.settings import load_settings
from tests.conftest import upgrade, write_config

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    otel.configure(otlp_endpoint=None, exporter=exporter)
    yield exporter
    otel.configure(otlp_endpoint=None)  # off again for the other tests


async def test_one_trace_from_the_request_through_the_worker_to_the_send(tmp_path, help_center_bot, spans):
    settings = load_settings(write_config(tmp_path, bots=[help_center_bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    async with app.router.lifespan_context(app):
        await app.state.services.knowledge.ingest()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test", timeout=60) as http:
            response = await http.post("/v1/bots/acme/chat", json={"session_id": "otel-1", "text": "How much is Plus?"},
                                       headers={"traceparent": PARENT})
    assert response.status_code == 200 and response.headers["traceparent"].startswith(f"00-{TRACE}-")
    finished = {s.name: s for s in spans.get_finished_spans()}
    request = finished["POST /v1/bots/{bot}/chat"]
    process = finished["message.process"]
    # The request continues the caller's trace; the worker continues the request's, as its child.
    assert format(request.context.trace_id, "032x") == TRACE and format(request.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert process.context.trace_id == request.context.trace_id and process.parent.span_id == request.context.span_id
    for step in ("pipeline.retrieve", "pipeline.answer", "outbox.send"):
        assert finished[step].parent.span_id == process.context.span_id, step
    assert finished["pipeline.retrieve"].attributes["gateway.hits"] > 0
    assert finished["pipeline.answer"].attributes["gateway.answered"] is True
    assert finished["outbox.send"].attributes["gateway.channel"] == "web"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["http.route"] == "/v1/bots/{bot}/chat" and request.attributes["url.path"] == "/v1/bots/acme/chat"


async def test_request_spans_are_named_by_route_not_by_path(tmp_path, help_center_bot, spans):
    """Named by the raw path, each web chat session's transcript was a span name of its own: names
    without bound in the tracing backend, as a per-user metric label would be."""
    settings = load_settings(write_config(tmp_path, bots=[help_center_bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as http:
            for session in ("visitor-1", "visitor-2"):
                await http.get(f"/v1/bots/acme/sessions/{session}/messages")
            await http.get("/no/such/page")
    names = [s.name for s in spans.get_finished_spans()]
    assert names == ["GET /v1/bots/{bot}/sessions/{session_id}/messages"] * 2 + ["GET"]
    # Nor is the session id in the raw path: it is all it takes to read the conversation and write as the visitor.
    assert [s.attributes["url.path"] for s in spans.get_finished_spans()][:2] == ["/v1/bots/acme/sessions/…/messages"] * 2


def test_tracing_is_a_no_op_until_configured():
    otel.configure(otlp_endpoint=None)
    with otel.span("anything") as current:
        assert otel.trace_id_of(current) is None
    assert otel.current_traceparent().startswith("00-")  # still a parent for log correlation


def test_an_exception_on_a_span_is_redacted_as_the_log_redacts_it(spans):
    """A span recorded its exception's message and traceback as they were: a provider's error quoting the key,
    a driver's URL with its password and a customer's phone number went to the tracing backend, which the log
    redacts (review)."""
    key, password, phone = "sk-live-" + "OTEL1" * 4, "PASS" + "WORD-2", "+1555" + "1234567"
    configure_logging(level="INFO", secrets=[key])
    try:
        with pytest.raises(RuntimeError), otel.span("pipeline.answer"):
            try:
                raise ValueError(f"tool failed at https://bob:{password}@db.internal/x")
            except ValueError as inner:
                raise RuntimeError(f"provider said: bad key {key} for whatsapp:{phone}") from inner
    finally:
        configure_logging(level="INFO")
    [span] = spans.get_finished_spans()
    [event] = span.events
    assert event.name == "exception" and event.attributes["exception.type"] == "RuntimeError"
    message, stacktrace = event.attributes["exception.message"], event.attributes["exception.stacktrace"]
    assert message == "provider said: bad key [REDACTED] for whatsapp:+…4567"
    assert "ValueError: tool failed at https://bob:[REDACTED]@db.internal/x" in stacktrace  # the chain is kept
    assert not any(secret in message + stacktrace for secret in (key, password, phone))
    assert span.status.description == "RuntimeError"


class _Collector(http.server.BaseHTTPRequestHandler):
    """A local OTLP/HTTP collector: keeps every ExportTraceServiceRequest it is sent."""

    received: list[tuple[str, str | None, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Collector.received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


async def test_otlp_endpoint_in_config_exports_spans_over_http(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Collector.received.clear()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        settings = load_settings(write_config(tmp_path, tracing={"otlp_endpoint": endpoint, "service_name": "gw-test"}))
        await asyncio.to_thread(upgrade, settings.database_url)
        app = create_app(settings, start_scheduler=False)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as http_:
                assert (await http_.post("/v1/bots/acme/chat", json={"session_id": "o", "text": "How do refunds work?"})).status_code == 200
        # Leaving the lifespan shut the provider down, which flushed the batch.
    finally:
        server.shutdown()
        otel.configure(otlp_endpoint=None)
    assert _Collector.received, "nothing was exported"
    names, services = set(), set()
    for path, content_type, body in _Collector.received:
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            names |= {s.name for scope in resource_spans.scope_spans for s in scope.spans}
    assert services == {"gw-test"}
    assert {"POST /v1/bots/{bot}/chat", "message.process", "pipeline.answer", "outbox.send"} <= names
