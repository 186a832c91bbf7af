"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import func, select, text

from gateway.http.deps import services, utc_iso
from gateway.models import as_utc, utcnow
from gateway.observability.logs import redact
from gateway.operators.slack_access import operator_channel_status
from rag.ingest_runs import latest_runs, running_runs
from storage import repositories as repo
from storage.models import Message

router = APIRouter(tags=["operations"])


# HEAD too: some load balancers probe with it, and a 405 read as "down". (One route of both methods
# gave both the same OpenAPI operation id.)
@router.get("/healthz")
@router.head("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
@router.head("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    """Ready when the database and the vector index answer; lists the next scheduled ingests, how
    each source's last ingest ended and each bot's chunk count (a failing source or an empty collection
    is reported, not a reason to stop traffic: the start ingests an empty collection). With `redis_url`
    set, `redis` says whether the shared rate limit counters answer: reported, not readiness either,
    because the limiter fails open (every replica shares that Redis; failing them all would stop every
    message over a limiter outage). It is asked alongside the other checks, within its own short timeout.
    `models` names each model whose provider refused its key, its name or its account (401, 403, 404, no
    credit), or whose `api_base` the HTTP client refused (`user:password@` beside a key), on its last call, the provider's words redacted as the log's are; `model_calls`, each model called since
the process started: `last_success_at`, `last_failure` (`at`, `failure`, `endpoint`) and `failures_since_success`.
`operator_channels` says, for
    each bot with a Slack operator channel, "ok" or that it refuses everyone (no operator names a member)."""
    svc = services(request)
    limiter = getattr(svc, "rate_limiter", None)
    redis = asyncio.create_task(_redis_status(limiter)) if limiter is not None and limiter.backend == "redis" else None
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(5):
            async with svc.sessions() as session:
                await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    if svc.role != "web":  # a receiving-only process has no index
        try:
            async with asyncio.timeout(5):
                await svc.knowledge.ping()
            checks["qdrant"] = "ok"
        except Exception as exc:
            checks["qdrant"] = redact(f"error: {type(exc).__name__}: {exc}")[:200]
    ready = all(v == "ok" for v in checks.values())
    body = {"status": "ready" if ready else "not ready", "role": svc.role, "checks": checks,
            # Long-lived platform connections (the Discord gateway), reported without failing readiness.
            "connections": {f"{bot}/{channel}": redact(svc.start_failures.get((bot, channel)) or adapter.connection_status)
                            for (bot, channel), adapter in svc.adapters.items()
                            if (bot, channel) in svc.start_failures
                            or isinstance(getattr(adapter, "connection_status", None), str)},
            **({"redis": await redis} if redis is not None else {}),
            # Reported, not readiness: each bot's Slack operator channel, "ok" or why it refuses every operator.
            "operator_channels": operator_channel_status(svc.settings),
            # Reported, not readiness: the fallbacks still answer, but only an operator can fix it.
            "models": {name: redact(error) for name, error in svc.llm.refused.items()} if svc.role != "web" else {},
            # Reported, not readiness: each model called since start, its last answer and last failure (when, its
            # kind, the endpoint as scheme://host:port), so a model failing on every call is seen (a refused port).
            "model_calls": svc.llm.calls.report() if svc.role != "web" else {},
            "schedule": svc.scheduler.next_runs() if svc.scheduler and svc.role != "web" else {},
            # Whether this replica runs them: every `all` replica lists the times, only the leader acts.
            "scheduler_leader": bool(svc.scheduler and svc.role != "web"
                                     and (getattr(svc, "leader", None) is None or svc.leader.is_leader)),
            "ingest": await _last_ingests(svc) if checks["database"] == "ok" else {},
            "chunks": await _chunk_counts(svc) if checks.get("qdrant") == "ok" else {}}
    return JSONResponse(body, status_code=200 if ready else 503)


async def _redis_status(limiter) -> str:
    """"ok", or "error: <Type>" when the rate limiter's Redis fails or does not answer in time."""
    try:
        await limiter.ping()
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}"


async def _chunk_counts(svc) -> dict[str, int]:
    """bot -> chunks in its collection, for bots with sources: 0 means every question gets the fallback."""
    try:
        async with asyncio.timeout(5):
            return {bot.name: await svc.knowledge.index.count(bot.name) for bot in svc.settings.bots if bot.sources}
    except Exception:  # the index answered a moment ago; this is detail, not readiness
        return {}


async def _last_ingests(svc) -> dict[str, dict[str, object]]:
    """"bot/source" -> how its last finished ingest ended, for every configured source, and under `running`
    the run going, if one is: what started it, when, and how far it is when this process runs it. Without
    it a crawl of hours showed only the run before it. A run of this process that waits for an ingest slot
    is under `waiting`, with the sources whose runs hold the slots."""
    try:
        runs, going = await latest_runs(svc.sessions), await running_runs(svc.sessions)
    except Exception:  # the database answered SELECT 1 a moment ago; this is detail, not readiness
        return {}
    out: dict[str, dict[str, object]] = {}
    for bot in svc.settings.bots:
        for source in bot.sources:
            run = runs.get((bot.name, source.name))
            entry: dict[str, object] = {"status": "never run"} if run is None else {
                "status": run.status, "started_at": utc_iso(run.started_at),
                # The last error says what is wrong now; the count says whether it is one page or many. Redacted
                # as the log is: /readyz answers anyone, and a sitemap's URL may carry a password.
                **({"error": redact(run.errors[-1]), "errors": len(run.errors) + run.errors_dropped} if run.errors and run.status != "ok" else {})}
            here = svc.knowledge.holder(bot.name, source.name)  # None when another process runs it
            if (now := going.get((bot.name, source.name))) is not None:
                entry["running"] = {"trigger": now.trigger, "started_at": utc_iso(now.started_at),
                                    **(here.progress() if here is not None else {})}
            elif here is not None and not here.slot:
                # Recorded once it has a slot: until then the source read as idle, its run nowhere to be seen.
                entry["waiting"] = {"trigger": here.trigger, "since": utc_iso(here.since),
                                    "slots_held_by": list(svc.knowledge.slot_holders())}
            out[f"{bot.name}/{source.name}"] = entry
    return out


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus exposition of the gateway's own registry."""
    svc = services(request)
    leader = getattr(svc, "leader", None)
    leads = svc.scheduler is not None and (leader is None or leader.is_leader)
    svc.metrics.is_leader.set(1 if leads else 0)
    try:
        async with svc.sessions() as session:
            queue_depth = await repo.queue_depth(session)
            outbox_depth = await repo.outbox_depth(session)
            oldest = (await session.execute(select(func.min(Message.created_at)).where(
                Message.direction == "in", Message.status == "pending"))).scalar_one_or_none()
        runs = await latest_runs(svc.sessions)
    except Exception:  # metrics must render even when the database is down: without what it would have said
        svc.metrics.store_unreadable()
    else:
        svc.metrics.store_read(queue_depth=queue_depth, outbox_depth=outbox_depth,
                               queue_lag=(utcnow() - as_utc(oldest)).total_seconds() if oldest else 0.0)
        for (bot, source), run in runs.items():
            if any(s.name == source for b in svc.settings.bots if b.name == bot for s in b.sources):
                svc.metrics.ingest_last_ok.labels(bot=bot, source=source).set(1 if run.status == "ok" else 0)
                ended = as_utc(run.started_at).timestamp() + (run.duration_s or 0.0)
                svc.metrics.ingest_last_end.labels(bot=bot, source=source).set(ended)
    return Response(svc.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
