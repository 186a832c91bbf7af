"""`gateway_http_requests_total{route,method,status}` and `gateway_http_request_seconds{route}`: every
response counted under its route template (bounded labels), streamed bodies passed on untouched."""

from __future__ import annotations

import warnings

import pytest

from gateway.observability.metrics import HttpMetricsMiddleware, Metrics
from tests.conftest import app_client, chat_events

BOT = {"name": "acme", "channels": {"web": {"per_address_per_minute": None},
                                    "telegram": {"token": "${OBS_TG_TOKEN}", "webhook_secret": "${OBS_TG_SECRET}"}}}
ENV = {"OBS_TG_TOKEN": "123:abc", "OBS_TG_SECRET": "tg-secret-123456"}


def _requests(metrics: Metrics, *, route: str, method: str, status: str) -> float:
    return metrics.registry.get_sample_value(
        "gateway_http_requests_total", {"route": route, "method": method, "status": status}) or 0.0


async def test_http_metrics_count_responses_by_route_template(tmp_path) -> None:
    async with app_client(tmp_path, bots=[BOT], env=ENV) as client:
        metrics = client.services.metrics
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/v1/bots/acme/sessions/raw-session-77/messages")).status_code == 200
        assert (await client.get("/no/such/path-9f3")).status_code == 404
        assert (await client.get("/static/widget.js")).status_code == 200
        refused = await client.post("/webhooks/acme/telegram", content=b"{}",
                                    headers={"content-type": "application/json",
                                             "X-Telegram-Bot-Api-Secret-Token": "wrong"})
        assert refused.status_code == 401
        events = await chat_events(client, "acme", "sse-1", "Hi there, how do I reset my password?")
        assert events and events[-1][0] == "done"
        await client.get("/metrics")
        text = (await client.get("/metrics")).text

    assert _requests(metrics, route="/healthz", method="GET", status="200") == 1
    assert _requests(metrics, route="/v1/bots/{bot}/sessions/{session_id}/messages", method="GET", status="200") == 1
    assert _requests(metrics, route="unmatched", method="GET", status="404") == 1
    assert _requests(metrics, route="/static/{path}", method="GET", status="200") == 1  # a mount: its prefix
    assert _requests(metrics, route="/webhooks/{bot}/{channel_path}", method="POST", status="401") == 1
    assert _requests(metrics, route="/v1/bots/{bot}/chat", method="POST", status="200") == 1  # the SSE stream
    assert 'gateway_http_requests_total{method="GET",route="/metrics",status="200"} 1.0' in text  # itself, too
    assert metrics.registry.get_sample_value("gateway_http_request_seconds_count", {"route": "/healthz"}) == 1
    # Raw paths never become label values.
    assert "raw-session-77" not in text and "path-9f3" not in text and "/webhooks/acme/" not in text and "widget.js" not in text


async def test_http_metrics_middleware_passes_a_stream_through_unbuffered() -> None:
    metrics, sent = Metrics(), []
    seen_by_app: list[tuple[int, float]] = []

    async def streaming_app(scope, receive, send) -> None:
        scope["route"] = type("Route", (), {"path_format": "/v1/stream/{id}"})()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for chunk in (b"a", b"b"):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Each chunk is already downstream, and the response was counted at its start.
            seen_by_app.append((len(sent), _requests(metrics, route="/v1/stream/{id}", method="GET", status="200")))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v1/stream/42", "headers": []}
    await HttpMetricsMiddleware(streaming_app, metrics=metrics)(scope, None, send)
    assert seen_by_app == [(2, 1.0), (3, 1.0)]
    assert [m.get("body") for m in sent[1:]] == [b"a", b"b", b""]


async def test_http_metrics_middleware_counts_an_exception_before_the_response_as_500() -> None:
    metrics = Metrics()

    async def broken_app(scope, receive, send) -> None:
        raise RuntimeError("boom")

    async def send(message) -> None:  # pragma: no cover - nothing is sent
        raise AssertionError(message)

    scope = {"type": "http", "method": "POST", "path": "/anything", "headers": []}
    with pytest.raises(RuntimeError):
        await HttpMetricsMiddleware(broken_app, metrics=metrics)(scope, None, send)
    assert _requests(metrics, route="unmatched", method="POST", status="500") == 1


async def test_http_metrics_middleware_ignores_lifespan_and_websocket_scopes() -> None:
    metrics, called = Metrics(), []

    async def app(scope, receive, send) -> None:
        called.append(scope["type"])

    for kind in ("lifespan", "websocket"):
        await HttpMetricsMiddleware(app, metrics=metrics)({"type": kind}, None, None)
    assert called == ["lifespan", "websocket"]
    assert "gateway_http_requests_total{" not in metrics.render().decode()


async def test_health_routes_answer_a_load_balancers_head_probe(tmp_path) -> None:
    """Some load balancers probe with HEAD: a 405 read as "down"."""
    async with app_client(tmp_path, bots=[BOT], env=ENV) as client:
        for route in ("/healthz", "/readyz"):
            response = await client.head(route)
            assert response.status_code == 200 and response.content == b"", route
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            schema = (await client.get("/openapi.json")).json()
        assert not [w for w in caught if "Duplicate Operation ID" in str(w.message)]  # one route of both methods did
        assert "head" not in schema["paths"]["/healthz"]


async def test_a_loop_of_badly_signed_webhooks_logs_the_first_then_a_count_a_minute(tmp_path, capsys, monkeypatch) -> None:
    # Each one logged webhook.signature_invalid: a client posting in a loop filled the log.
    from gateway.observability import repeats

    now = [1000.0]
    monkeypatch.setattr(repeats.time, "monotonic", lambda: now[0])
    async with app_client(tmp_path, bots=[BOT], env=ENV) as client:
        capsys.readouterr()
        for _ in range(40):
            now[0] += 1
            response = await client.post("/webhooks/acme/telegram", content=b"{}",
                                         headers={"x-telegram-bot-api-secret-token": "wrong"})
            assert response.status_code == 401
        logs = capsys.readouterr().err
        failures = client.services.metrics.registry.get_sample_value(
            "gateway_signature_failures_total", {"bot": "acme", "channel": "telegram"})
    assert failures == 40  # the metric counts every one
    assert logs.count("webhook.signature_invalid ") == 5
    assert logs.count("webhook.signature_invalid_repeated") == 0  # not a minute yet
    now[0] += 30
    async with app_client(tmp_path, bots=[BOT], env=ENV) as client:  # a fresh process: a run of its own
        capsys.readouterr()
        for _ in range(70):
            now[0] += 1
            await client.post("/webhooks/acme/telegram", content=b"{}",
                              headers={"x-telegram-bot-api-secret-token": "wrong"})
        logs = capsys.readouterr().err
    assert logs.count("webhook.signature_invalid ") == 5
    assert logs.count("webhook.signature_invalid_repeated") == 1 and "count=56 " in logs  # the 6th to the 61st
