"""A bug in a route is a JSON 500 on a connection that stays usable (Starlette's own handler re-raised)."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.http.unhandled import UnhandledErrors


async def _boom(_request):
    raise RuntimeError("a bug")


async def _fine(_request):
    return PlainTextResponse("ok")


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
