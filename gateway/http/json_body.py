"""The route class of the JSON APIs (web chat, operators): bodies capped, and read as JSON when the
client named no content type.

Why: FastAPI reads a body without `Content-Type` as raw bytes, so `{bad` (and even valid JSON) got 422
"Input should be a valid dictionary". As the README promises, a body without a type is JSON: malformed
JSON gets 400 with where the parser stopped, and a body of another type gets 415 (the validation
handler in `gateway/app.py`).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from gateway.http.webhooks import CappedRoute

JSON_HEADER = (b"content-type", b"application/json")


class JsonRoute(CappedRoute):
    """A `CappedRoute` that reads a body sent without a `Content-Type` as JSON."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def as_json(request: Request) -> Response:
            if "content-type" not in request.headers:
                request.scope["headers"] = [*request.scope.get("headers", ()), JSON_HEADER]
                request = Request(request.scope, request.receive)
            return await handler(request)

        return as_json
