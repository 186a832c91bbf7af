"""A bug in a route is a JSON 500 on a connection that stays usable (Starlette's own handler re-raised);
a database that cannot be reached is a 503 with Retry-After."""

from __future__ import annotations

import json
import shutil
import socket

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.http.unhandled import UnhandledErrors
from gateway.observability.logs import configure_logging
from tests.conftest import app_client


async def _boom(_request):
    raise RuntimeError("a bug")


async def _fine(_request):
    return PlainTextResponse("ok")


def _querying(engine) -> Starlette:
    """An app whose one route, /query, runs SELECT 1 on `engine`, behind UnhandledErrors."""
    async def _query(_request):
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/query", _query)])
    app.add_middleware(UnhandledErrors)
    return app


async def test_a_bug_is_a_json_500_and_is_not_raised_to_the_server() -> None:
    app = Starlette(routes=[Route("/boom", _boom), Route("/fine", _fine)])
    app.add_middleware(UnhandledErrors)
    # raise_app_exceptions=True: an exception that escaped the middleware would fail this test here.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        boom = await client.get("/boom")
        fine = await client.get("/fine")
    assert boom.status_code == 500 and boom.json() == {"error": "internal error"}
    assert fine.text == "ok"


async def test_a_database_gone_away_is_a_503_with_retry_after(tmp_path) -> None:
    """The SQLite file's folder disappears while the app runs: every new connection fails to open it."""
    database = tmp_path / "db" / "gateway.db"
    bots = [{"name": "acme", "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots, start_worker=False, database_url=f"sqlite+aiosqlite:///{database}",
                          raise_app_exceptions=True) as client:
        ok = await client.get("/v1/bots/acme/sessions/s-1/messages")
        assert ok.status_code == 200
        await client.services.engine.dispose()  # no pooled connection keeps the old file open
        shutil.move(database.parent, tmp_path / "gone")

        chat = await client.post("/v1/bots/acme/chat", json={"session_id": "s-1", "text": "Hello?"})
        transcript = await client.get("/v1/bots/acme/sessions/s-1/messages")

        shutil.move(tmp_path / "gone", database.parent)  # the lifespan's shutdown needs it back
    for response in (chat, transcript):
        assert response.status_code == 503, response.text
        assert response.json() == {"error": "the database is unavailable; try again shortly"}
        assert response.headers["Retry-After"] == "5"


async def test_a_transcript_poll_in_an_outage_is_logged_without_its_session_id(tmp_path, capsys) -> None:
    """The 503's log line named the raw path, and with it the web session id: a bearer secret in the log
    of every visitor whose widget polled during the outage."""
    database = tmp_path / "db" / "gateway.db"
    bots = [{"name": "acme", "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots, start_worker=False, database_url=f"sqlite+aiosqlite:///{database}") as client:
        configure_logging(level="INFO", fmt="json")  # as serve logs: through the shared redaction
        await client.services.engine.dispose()
        shutil.move(database.parent, tmp_path / "gone")
        transcript = await client.get("/v1/bots/acme/sessions/web-5ecret5e55ion/messages")
        shutil.move(tmp_path / "gone", database.parent)
    assert transcript.status_code == 503
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    (outage,) = [line for line in lines if line["event"] == "http.database_unavailable"]
    assert outage["path"] == "/v1/bots/acme/sessions/…/messages" and "5ecret" not in repr(lines)


async def test_a_refused_database_connection_is_a_503() -> None:
    """asyncpg's ConnectionRefusedError reaches the route unwrapped: the port has nothing listening."""
    with socket.socket() as probe:  # a port that was free a moment ago: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_async_engine(f"postgresql+asyncpg://gateway@127.0.0.1:{port}/gateway")
    transport = httpx.ASGITransport(app=_querying(engine), raise_app_exceptions=True)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.get("/query")
    finally:
        await engine.dispose()
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"


async def test_a_pool_with_every_connection_busy_is_a_503_logged_in_one_line(tmp_path) -> None:
    """A burst against a locked or slow database: every pooled connection stays busy past the pool's
    timeout. SQLAlchemy's TimeoutError is no DBAPIError, and it was a 500 "internal error" with a
    traceback per request, as for a bug."""
    import structlog

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}", pool_size=1, max_overflow=0,
                                 pool_timeout=0.1)
    transport = httpx.ASGITransport(app=_querying(engine), raise_app_exceptions=True)
    try:
        async with engine.connect() as held, httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            await held.execute(text("SELECT 1"))  # the pool's only connection, busy
            with structlog.testing.capture_logs() as logs:
                response = await client.get("/query")
    finally:
        await engine.dispose()
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert [(line["event"], line["error_type"]) for line in logs] == [("http.database_unavailable", "TimeoutError")]
    assert "QueuePool limit" in logs[0]["error"] and "exc_info" not in logs[0]


async def test_an_os_error_outside_the_database_is_still_a_500() -> None:
    async def _missing_file(_request):
        raise FileNotFoundError("templates/missing.html")

    app = Starlette(routes=[Route("/file", _missing_file)])
    app.add_middleware(UnhandledErrors)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.get("/file")
    assert response.status_code == 500 and response.json() == {"error": "internal error"}


async def test_the_api_docs_are_not_published_in_production(tmp_path, monkeypatch):
    """/docs, /redoc and /openapi.json list every route: served in development only."""
    from gateway.app import create_app
    from gateway.settings import load_settings
    from tests.conftest import write_config

    for environment, expected in (("development", 200), ("production", 404)):
        monkeypatch.setenv("ENVIRONMENT", environment)
        app = create_app(load_settings(write_config(tmp_path, bots=[{"name": "acme"}])), start_worker=False,
                         start_scheduler=False, start_channels=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
            assert [(await client.get(path)).status_code for path in ("/docs", "/redoc", "/openapi.json")] == [expected] * 3


async def _error_of(url: str, statement: str) -> Exception:
    """The exception a real engine raises for `statement`."""
    from sqlalchemy import text

    from storage.engine import create_engine

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
    raise AssertionError(f"{statement!r} did not fail")


async def test_a_query_that_is_wrong_stays_a_500_on_sqlite_and_postgres(tmp_path, postgres_url) -> None:
    """SQLite reports a missing table or a syntax error as OperationalError too: that is a bug or a
    missing migration, which retrying never fixes, so it must not be a 503."""
    from gateway.http.unhandled import database_unavailable

    sqlite = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    for statement in ("SELECT * FROM no_such_table", "SELEC 1"):
        assert not database_unavailable(await _error_of(sqlite, statement))
    for statement in ("SELECT * FROM no_such_table", "SELECT 1 / 0"):
        assert not database_unavailable(await _error_of(postgres_url, statement))


def test_postgres_states_of_a_server_that_cannot_take_queries_now_are_503() -> None:
    """asyncpg gives the SQLSTATE as `sqlstate` (SQLAlchemy keeps the driver's error as `orig`)."""
    from sqlalchemy.exc import DBAPIError

    from gateway.http.unhandled import database_unavailable

    class PostgresError(Exception):
        def __init__(self, sqlstate: str) -> None:
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    def wrapped(sqlstate: str) -> DBAPIError:
        return DBAPIError("SELECT 1", {}, PostgresError(sqlstate))

    assert all(database_unavailable(wrapped(s)) for s in ("57P03", "53300", "08006", "57P01"))
    assert not any(database_unavailable(wrapped(s)) for s in ("42P01", "22012", "23505"))


async def test_a_client_gone_before_its_body_arrived_is_no_500(tmp_path) -> None:
    """A phone that loses signal mid-upload: the body stops and the connection closes. Counted as 499
    and logged as one info line, not as a 500 bug with a traceback that an alert would count."""
    import structlog

    telegram = {"token": "${UE_TG_TOKEN}", "webhook_secret": "${UE_TG_SECRET}", "api_base": "http://127.0.0.1:9"}
    bots = [{"name": "acme", "channels": {"web": {}, "telegram": telegram}}]
    env = {"UE_TG_TOKEN": "123456:unhandled-test", "UE_TG_SECRET": "s3cret-Value_1"}
    async with app_client(tmp_path, bots=bots, env=env, start_worker=False) as client:
        app = client._transport.app
        for path in ("/v1/bots/acme/chat", "/webhooks/acme/telegram"):
            incoming = [{"type": "http.request", "body": b'{"session_id": "t"', "more_body": True}]

            async def receive():
                return incoming.pop(0) if incoming else {"type": "http.disconnect"}

            sent = []

            async def send(message, sent=sent):
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                     "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                     "headers": [(b"host", b"gateway.test"), (b"content-type", b"application/json"),
                                 (b"content-length", b"100")],
                     "client": ("127.0.0.1", 50000), "server": ("gateway.test", 80)}
            with structlog.testing.capture_logs() as logs:
                await app(scope, receive, send)  # raises nothing to the server
            assert sent[0]["status"] == 499, (path, sent)
            assert [entry["event"] for entry in logs if entry["log_level"] in ("error", "critical")] == [], logs
        metrics = (await client.get("/metrics")).text
    counted = [line for line in metrics.splitlines() if line.startswith("gateway_http_requests_total{")]
    assert not [line for line in counted if 'status="500"' in line], counted
    assert any('status="499"' in line and "/v1/bots/{bot}/chat" in line for line in counted), counted
