"""The last catch for a bug in a route: a JSON 500, logged once, and the connection kept.

Starlette's `exception_handler(Exception)` runs in its outermost middleware, which sends the 500
and then raises the exception again, so uvicorn logged every such bug a second time and closed
the connection: the client's next request on it failed with "connection reset". A pure ASGI
middleware inside it answers and stops there.
"""

from __future__ import annotations

import structlog
from starlette.responses import JSONResponse

log = structlog.get_logger("gateway.http")


class UnhandledErrors:
    """Pure ASGI middleware: an exception out of the app becomes `{"error": "internal error"}`, 500."""

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
            log.exception("http.unhandled", error_type=type(exc).__name__, path=scope.get("path", ""))
            if started:  # part of a response went out: only closing the connection can say it failed
                raise
            await JSONResponse({"error": "internal error"}, status_code=500)(scope, receive, send)
