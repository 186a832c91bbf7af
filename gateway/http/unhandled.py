"""The last catch for an error in a route: a JSON answer, logged once, and the connection kept.

- A database that cannot be reached is temporary: 503 `{"error": …}` with `Retry-After`, so clients
  (and load balancers) retry rather than report a bug. So is a connection pool whose every connection
  stayed busy past its timeout (a burst against a slow or locked database).
- A client that went away before its body was read (a phone losing signal mid-upload) is no error of
  ours: one info line, and 499 (nginx's "client closed request") in the metrics, not a 500 an alert
  would count. The response goes nowhere; the server drops it.
- Anything else is a bug: `{"error": "internal error"}`, 500, logged with its traceback.

Starlette's `exception_handler(Exception)` runs in its outermost middleware, which sends the 500
and then raises the exception again, so uvicorn logged every such bug a second time and closed
the connection: the client's next request on it failed with "connection reset". A pure ASGI
middleware inside it answers and stops there.
"""

from __future__ import annotations

import structlog
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

log = structlog.get_logger("gateway.http")

DATABASE_UNAVAILABLE = "the database is unavailable; try again shortly"
CLIENT_CLOSED_REQUEST = 499
RETRY_AFTER_SECONDS = 5
# Where a raw OSError comes from when the database is down: asyncpg's connect() raises
# ConnectionRefusedError and the like as they are, without SQLAlchemy's wrapping.
_DATABASE_MODULES = ("sqlalchemy", "asyncpg", "aiosqlite", "psycopg", "sqlite3")


# SQLite raises OperationalError for a missing table or a syntax error too: only these say "not now".
_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file", "disk i/o error",
                       "database or disk is full")
# PostgreSQL SQLSTATEs of a server that cannot take the query now: class 08 (connection exceptions),
# 57P01-57P03 (shutting down, crashed, starting up), 53300 (too many connections).
_PG_UNAVAILABLE = ("57P01", "57P02", "57P03", "53300")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (rather than that a query is wrong)."""
    if isinstance(exc, PoolTimeout):
        # "QueuePool limit … reached, connection timed out": every connection is held by queries that
        # wait (a lock, a slow disk). It was a 500 "internal error" with a traceback per request.
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated or isinstance(exc, InterfaceError):
            return True
        orig = exc.orig
        state = str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")
        if state:
            return state.startswith("08") or state in _PG_UNAVAILABLE
        if _is_sqlite(orig):
            return any(words in str(orig).lower() for words in _SQLITE_UNAVAILABLE)
        return isinstance(exc, OperationalError)
    # Only an OSError raised inside a database driver: a missing file in a route is still a bug.
    return isinstance(exc, OSError) and _raised_in_database_code(exc)


def _is_sqlite(error: BaseException | None) -> bool:
    return type(error).__module__.split(".")[0] in ("sqlite3", "aiosqlite")


def _raised_in_database_code(exc: BaseException) -> bool:
    frame = exc.__traceback__
    while frame is not None:
        module = frame.tb_frame.f_globals.get("__name__", "")
        if module.split(".")[0] in _DATABASE_MODULES:
            return True
        frame = frame.tb_next
    return False


class UnhandledErrors:
    """Pure ASGI middleware: an exception out of the app becomes a 503 (database unreachable) or a
    500 `{"error": "internal error"}`."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            path = scope.get("path", "")
            if isinstance(exc, ClientDisconnect):
                log.info("http.client_disconnected", path=path)
                response = JSONResponse({"error": "the client closed the request"}, status_code=CLIENT_CLOSED_REQUEST)
            elif database_unavailable(exc):
                # An outage, not a bug: one line without a traceback, which would only show our own frames.
                reason = str(getattr(exc, "orig", None) or exc)[:300]  # the driver's words, without SQL or parameters
                log.error("http.database_unavailable", error_type=type(exc).__name__, error=reason, path=path)
                response = JSONResponse({"error": DATABASE_UNAVAILABLE}, status_code=503,
                                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            else:
                log.exception("http.unhandled", error_type=type(exc).__name__, path=path)
                response = JSONResponse({"error": "internal error"}, status_code=500)
            if started:  # part of a response went out: only closing the connection can say it failed
                raise
            await response(scope, receive, send)
