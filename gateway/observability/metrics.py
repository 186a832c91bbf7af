"""Prometheus metrics, in a registry owned by the app that creates them, and the HTTP middleware that
counts every response."""

from __future__ import annotations

import functools
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.routing import Mount


class StoreGauges:
    """The gauges read from the database at each scrape (a collector): only those this scrape read."""

    FAMILIES = {"queue_depth": ("gateway_queue_depth", "Inbound messages waiting for an answer"),
                "queue_lag": ("gateway_queue_lag_seconds", "Age of the oldest inbound message waiting"),
                "outbox_depth": ("gateway_outbox_depth", "Replies stored and not yet sent (waiting or retrying)")}

    def __init__(self) -> None:
        self.values: dict[str, float] | None = None

    def collect(self):
        for key, value in (self.values or {}).items():
            name, documentation = self.FAMILIES[key]
            yield GaugeMetricFamily(name, documentation, value=value)


class Metrics:
    """The gateway's Prometheus metrics, in a registry of its own (no globals)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("gateway_messages_in_total", "Inbound messages stored", ["bot", "channel"], registry=r)
        self.duplicates = Counter("gateway_duplicate_deliveries_total", "Deliveries acknowledged as duplicates",
                                  ["bot", "channel"], registry=r)
        self.messages_out = Counter("gateway_messages_out_total", "Outbound messages by final status",
                                    ["bot", "channel", "status"], registry=r)
        self.stage_seconds = Histogram("gateway_stage_seconds", "Latency per pipeline stage", ["stage"],
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                       registry=r)
        self.refusals = Counter("gateway_gate1_refusals_total", "Questions refused by gate 1", ["bot"], registry=r)
        self.escalations = Counter("gateway_escalations_total", "Escalations opened", ["bot"], registry=r)
        handoff_buckets = (10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
        self.time_to_claim = Histogram("gateway_escalation_time_to_claim_seconds", "Escalation waiting (opened or released) → claimed",
                                       ["bot"], buckets=handoff_buckets, registry=r)
        self.time_to_resolve = Histogram("gateway_escalation_time_to_resolve_seconds",
                                         "Escalation opened → resolved", ["bot"], buckets=handoff_buckets, registry=r)
        self.llm_tokens = Counter("gateway_llm_tokens_total", "LLM tokens", ["bot", "model", "kind"], registry=r)
        self.llm_cost = Counter("gateway_llm_cost_usd_total", "LLM cost in USD", ["bot", "model"], registry=r)
        self.llm_failures = Counter("gateway_llm_failures_total", "Model calls that failed (each attempt)",
                                    ["model", "retryable"], registry=r)
        self.send_failures = Counter("gateway_send_failures_total", "Replies the channel refused or lost",
                                     ["bot", "channel"], registry=r)
        # A platform outage shows here at once: a reply fails for good only after every attempt (minutes).
        self.send_retries = Counter("gateway_send_retries_total", "Send attempts that failed and were rescheduled",
                                    ["bot", "channel"], registry=r)
        self.rate_limited = Counter("gateway_rate_limited_total", "Inbound messages over a rate limit",
                                    ["bot", "scope"], registry=r)
        self.ratelimit_errors = Counter("gateway_ratelimit_errors_total",
                                        "Rate limit checks let through uncounted because the counter storage failed",
                                        registry=r)
        # Labelled by route template ("/v1/bots/{bot}/chat"), never the raw path, so the series stay bounded.
        self.http_requests = Counter("gateway_http_requests_total", "HTTP responses by route, method and status",
                                     ["route", "method", "status"], registry=r)
        self.http_seconds = Histogram("gateway_http_request_seconds",
                                      "Time from an HTTP request to its response start (a stream's body excluded)",
                                      ["route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                      registry=r)
        self.is_leader = Gauge("gateway_scheduler_leader", "1 when this replica runs scheduled jobs", registry=r)
        self.signature_failures = Counter("gateway_signature_failures_total", "Webhooks refused for their signature",
                                          ["bot", "channel"], registry=r)
        # Read from the store at each scrape, so every replica reports the same (the leader ingests). A scrape
        # that cannot read it leaves them out, so they go stale in Prometheus, instead of showing the last
        # values (an empty queue while /readyz said 503), and says so in gateway_database_scrape_error.
        self.store = StoreGauges()
        r.register(self.store)
        self.store_scrape_error = Gauge("gateway_database_scrape_error",
                                        "1 when this scrape could not read the database: the gauges read from it "
                                        "(queue, outbox, last ingest runs) are left out", registry=r)
        self.ingest_last_ok = Gauge("gateway_ingest_last_run_ok", "1 when the source's last ingest ended ok",
                                    ["bot", "source"], registry=r)
        self.ingest_last_end = Gauge("gateway_ingest_last_run_end_timestamp_seconds",
                                     "When the source's last ingest ended (Unix time)", ["bot", "source"], registry=r)

    def store_read(self, *, queue_depth: float, queue_lag: float, outbox_depth: float) -> None:
        """This scrape's values read from the database."""
        self.store.values = {"queue_depth": queue_depth, "queue_lag": queue_lag, "outbox_depth": outbox_depth}
        self.store_scrape_error.set(0)

    def store_unreadable(self) -> None:
        """The database could not be read for this scrape: its gauges are left out, not kept."""
        self.store.values = None
        self.ingest_last_ok.clear()
        self.ingest_last_end.clear()
        self.store_scrape_error.set(1)

    def observe_stage(self, stage: str, seconds: float) -> None:
        """Record the duration of one pipeline stage."""
        self.stage_seconds.labels(stage=stage).observe(seconds)

    def observe_claim(self, bot: str, seconds: float) -> None:
        """Record how long an escalation waited for an operator."""
        self.time_to_claim.labels(bot=bot).observe(max(0.0, seconds))

    def observe_resolve(self, bot: str, seconds: float) -> None:
        """Record how long an escalation took from opening to hand-back."""
        self.time_to_resolve.labels(bot=bot).observe(max(0.0, seconds))

    def message_in(self, *, bot: str, channel: str, duplicate: bool) -> None:
        """Count an inbound delivery the inbox accepted: stored, or a duplicate of one stored before."""
        (self.duplicates if duplicate else self.messages_in).labels(bot=bot, channel=channel).inc()

    def message_out(self, *, bot: str, channel: str, status: str) -> None:
        """Count an outbound message by its final status, or a failed attempt rescheduled (`retry`)."""
        if status == "retry":
            self.send_retries.labels(bot=bot, channel=channel).inc()
            return
        self.messages_out.labels(bot=bot, channel=channel, status=status).inc()
        if status == "failed":
            self.send_failures.labels(bot=bot, channel=channel).inc()

    def record_usage(self, bot: str, usage: list[dict]) -> None:
        """Count LLM tokens and cost from a turn's usage records (LiteLLM's own accounting)."""
        for item in usage:
            model = str(item.get("model") or "unknown")
            self.llm_tokens.labels(bot=bot, model=model, kind="prompt").inc(item.get("prompt_tokens") or 0)
            self.llm_tokens.labels(bot=bot, model=model, kind="completion").inc(item.get("completion_tokens") or 0)
            self.llm_cost.labels(bot=bot, model=model).inc(item.get("cost_usd") or 0.0)

    def timed(self, stage: str, func):
        """Wrap an async callable so each call is observed as `stage`."""
        @functools.wraps(func)
        async def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return await func(*args, **kwargs)
            finally:
                self.observe_stage(stage, time.monotonic() - started)
        return wrapper

    def observe_http(self, *, route: str, method: str, status: int, seconds: float) -> None:
        """Count one HTTP response and observe the time to its start."""
        self.http_requests.labels(route=route, method=method, status=str(status)).inc()
        self.http_seconds.labels(route=route).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


UNMATCHED_ROUTE = "unmatched"
# Any other method a client sends is counted as "other": the label must stay bounded too.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(scope) -> str:
    """The template of the route that answered ("/webhooks/{bot}/{channel_path}"), or "unmatched".

    The router records its match in the scope it was given (the same dict every middleware holds), so
    this is known by the time the response starts. A mount (`/static`) reports its prefix + "/{path}"."""
    route = scope.get("route")
    if route is None and scope.get("endpoint") is not None:  # FastAPI records a mount's app, not the Mount
        route = next((r for r in getattr(scope.get("router"), "routes", ())
                      if isinstance(r, Mount) and r.app is scope["endpoint"]), None)
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    if not isinstance(template, str) or not template:
        return UNMATCHED_ROUTE
    return template


class HttpMetricsMiddleware:
    """Pure ASGI middleware: `gateway_http_requests_total{route,method,status}` and
    `gateway_http_request_seconds{route}` for every HTTP response, /metrics included.

    Recorded when the response starts, so a server-sent event stream is counted once its headers are
    out and its body passes through untouched (nothing is buffered). An exception before any response
    counts as a 500 (the server's last handler answers that) and is raised again."""

    def __init__(self, app, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        method = scope.get("method", "GET")
        method = method if method in _METHODS else "other"
        responded = False

        async def send_counted(message) -> None:
            nonlocal responded
            if message["type"] == "http.response.start" and not responded:
                responded = True
                self.metrics.observe_http(route=route_template(scope), method=method, status=message["status"],
                                          seconds=time.monotonic() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            if not responded:
                self.metrics.observe_http(route=route_template(scope), method=method, status=500,
                                          seconds=time.monotonic() - started)
            raise
