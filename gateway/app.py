"""The composition root: `create_app(settings)` wires every service and the HTTP edge."""

from __future__ import annotations

from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gateway import __version__
from gateway.http import admin, health, webchat, webhooks
from gateway.http.client_address import forwarded_trust_warning
from gateway.http.unhandled import UnhandledErrors
from gateway.http.webchat import STATIC_DIR
from gateway.observability import otel
from gateway.observability.logs import configure_logging_for
from gateway.observability.metrics import HttpMetricsMiddleware
from gateway.observability.tracing import RequestContextMiddleware
from gateway.operators import api as operator_api
from gateway.operators import console as operator_console
from gateway.operators import slack_actions
from gateway.operators.slack_access import warn_unguarded
from gateway.preflight import models_missing_keys, uncalibrated_gates
from gateway.services import Services, build_services
from gateway.settings import Settings

log = structlog.get_logger("gateway.app")


FASTAPI_BODY_ERROR = "There was an error parsing the body"


def unreadable_body(cause: BaseException) -> str:
    """What was wrong with a JSON body the parser could not read for a reason other than its syntax
    (FastAPI answers all of these with one generic line, while a syntax error names its place)."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not valid JSON: it is not UTF-8 text (byte 0x{cause.object[cause.start]:02x} "
                f"at byte {cause.start})")
    if isinstance(cause, RecursionError):
        return "the body is not valid JSON: it is nested too deeply"
    if isinstance(cause, ValueError):  # an integer of more than 4,300 digits, say
        return f"the body is not valid JSON: {cause}"
    return f"{FASTAPI_BODY_ERROR} ({type(cause).__name__})"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request, said: str) -> list[str]:
    """The methods the request's path takes, of all its routes: Starlette's 405 (`said`, its `Allow`) names
    those of the path's first route only (`/readyz`'s HEAD, not its GET). A 405 from inside a route (the
    static files) keeps what that said. The app's root path, not the request's: a mount (/static) set that to
    its own, and the rest of the path would be matched as a route's (`/static/operator` as `/operator`)."""
    root_path = request.scope.get("app_root_path", request.scope.get("root_path", ""))

    def takes(method: str) -> bool:
        probe = {"type": "http", "method": method, "path": request.scope["path"], "root_path": root_path}
        return any(route.matches(probe)[0] is Match.FULL for route in request.app.routes)

    found = [method for method in _METHODS if takes(method)]
    return found if found and request.method not in found else [m.strip() for m in said.split(",") if m.strip()]


def create_app(settings: Settings, *, services: Services | None = None, start_worker: bool = True,
               start_scheduler: bool = True, start_channels: bool = True, role: str = "all",
               url: str | None = None) -> FastAPI:
    """Build the ASGI app. Services start in the lifespan and stop with it. `role="web"`: receive only.
    `url`: where it will listen, recorded beside the admin token for `gateway ingest`."""
    configure_logging_for(settings)
    svc = services or build_services(settings)
    svc.role = role
    disabled = set(svc.operator_auth.disabled if svc.operator_auth else ())
    for i, op in enumerate(settings.operators):
        if op.name in disabled:
            log.warning("operator.disabled", operator=op.name,
                        reason=f"no token: {settings.empty_secret_reason(f'operators[{i}].token')}")
    warn_unguarded(settings)
    if not settings.bots:  # an empty or unsaved file: a server that answers nothing, said only as `bots=[]`
        log.warning("gateway.no_bots", config=settings.config_path,
                    reason="the config has no bots, so nothing is answered: add one under `bots:`")
    svc.admin_url = url
    if settings.tracing.otlp_endpoint:
        otel.configure(otlp_endpoint=settings.tracing.otlp_endpoint, service_name=settings.tracing.service_name,
                       sample_ratio=settings.tracing.sample_ratio)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await svc.start(worker=start_worker, scheduler=start_scheduler, channels=start_channels)
        log.info("gateway.started", url=svc.admin_url, bots=[b.name for b in settings.bots],
                 channels=sorted(f"{b}/{c}" for b, c in svc.adapters if (b, c) not in svc.start_failures),
                 **({"failed_channels": sorted(f"{b}/{c}" for b, c in svc.start_failures)} if svc.start_failures else {}),
                 console=f"{svc.admin_url}/operator" if svc.admin_url else None)
        for warning in uncalibrated_gates(settings):
            log.warning("gate1.uncalibrated", reason=warning)
        for warning in models_missing_keys(settings):
            log.warning("llm.key_missing", reason=warning)
        if warning := forwarded_trust_warning():
            log.warning("http.forwarded_allow_all", reason=warning)
        try:
            yield
        finally:
            await svc.stop()
            if settings.tracing.otlp_endpoint:
                otel.shutdown()  # flushes the last spans
            log.info("gateway.stopped")

    # The interactive API docs list every route and bot-facing schema: handy in development, not to publish.
    docs = settings.environment != "production"
    app = FastAPI(title="Bot gateway", version=__version__, lifespan=lifespan, docs_url="/docs" if docs else None,
                  redoc_url="/redoc" if docs else None, openapi_url="/openapi.json" if docs else None)
    app.state.services = svc
    app.add_middleware(UnhandledErrors)  # added first, so inside the next one: its log lines carry the trace id
    app.add_middleware(RequestContextMiddleware, metrics=svc.metrics)
    app.add_middleware(HttpMetricsMiddleware, metrics=svc.metrics)  # outermost of ours: sees every answer, 500s too

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if first.get("loc", ())[:1] == ("body",) and content_type not in ("application/json", ""):
            return JSONResponse({"error": f"send JSON (Content-Type: application/json), not {content_type!r}"},
                                status_code=415)
        if first.get("type") == "json_invalid":  # a syntax error in the body is the client's, not a bad field: 400
            reason = first.get("ctx", {}).get("error", "decode error")
            return JSONResponse({"error": f"the body is not valid JSON: {reason} at character {first['loc'][-1]}"},
                                status_code=400)
        if first.get("type") == "missing" and not where:
            return JSONResponse({"error": "a JSON body is required"}, status_code=422)
        if first.get("type") == "model_attributes_type" and not where:  # `[{…}]` or `"hi"`: valid JSON, no object
            kind = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(
                type(exc.body), "a number")
            return JSONResponse({"error": f'the body must be a JSON object ({{"key": value, …}}), not {kind}'},
                                status_code=422)
        said = first.get("msg", "invalid request")
        if first.get("type") == "missing" and isinstance(exc.body, dict):  # a misspelt key: show what came
            keys = [str(k)[:40] for k in list(exc.body)[:10]]
            said += f" (the body has: {', '.join(keys)})" if keys else " (the body has no keys)"
        return JSONResponse({"error": f"{where}: {said}" if where else said}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The same {"error": …} shape as every other error.
        detail, headers = str(exc.detail), exc.headers
        if detail == FASTAPI_BODY_ERROR and exc.__cause__ is not None:
            detail = unreadable_body(exc.__cause__)
        if exc.status_code == 405 and (methods := allowed_methods(request, (headers or {}).get("Allow", ""))):
            # "Method Not Allowed" alone left a `GET /v1/bots/acme/chat` to guess what to send.
            said = f"{', '.join(methods[:-1])} or {methods[-1]}" if len(methods) > 1 else methods[0]
            detail, headers = f"method {request.method} not allowed here: use {said}", {
                **(headers or {}), "Allow": ", ".join(methods)}
        return JSONResponse({"error": detail}, status_code=exc.status_code, headers=headers)

    app.include_router(health.router)
    app.include_router(webchat.router)
    app.include_router(operator_api.router)
    app.include_router(operator_console.router)
    app.include_router(slack_actions.router)  # before the catch-all /webhooks/{bot}/{channel_path}
    app.include_router(webhooks.router)
    app.include_router(admin.router)
    app.mount("/static", operator_console.StaticAssets(directory=STATIC_DIR), name="static")
    return app
