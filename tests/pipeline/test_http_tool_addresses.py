"""Where an `http` tool's call may connect: the model's arguments cannot choose the server (test_http_tools),
but the configured host's name can still resolve to this machine or to the cloud's metadata service (DNS
rebinding, a name whose owner points it there), and an answer can redirect. A real server on loopback stands
in for both; `dns_answers` (tests/conftest.py) is the DNS."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from gateway.models import CallerIdentity
from gateway.pipeline.tools import BotTools
from gateway.settings import BotSettings
from tests.fakes.web_server import serving

ALICE = CallerIdentity(bot="acme", channel="web", contact_external_id="alice")
ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}}}


@asynccontextmanager
async def internal_service():
    """A service on this machine that records each path asked; /redirect sends the caller to /secret."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.raw_path)
        if request.path.startswith("/redirect"):
            raise web.HTTPFound(str(request.url.with_path("/latest/meta-data/iam")))
        return web.json_response({"secret": "instance-credentials"})

    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", handle)  # a decoded CRLF in the path too
    async with serving(app) as base:
        yield base, asked


def order_tool(url: str) -> BotTools:
    return BotTools(BotSettings(name="acme", tools=[{"name": "order", "type": "http", "url": url, "parameters": ORDER}]))


async def test_an_http_tool_whose_public_host_resolves_to_this_machine_sends_no_request(dns_answers):
    async with internal_service() as (base, asked):
        port = base.rsplit(":", 1)[1]
        dns_answers["api.shop.example"] = "127.0.0.1"
        with capture_logs() as logs:
            outcome = await order_tool(f"http://api.shop.example:{port}/admin/purge/{{order_id}}").call(
                "order", {"order_id": "A-1"}, identity=ALICE)
        assert asked == []
        assert outcome.result is None and outcome.error is not None
        assert "address of this machine or of the cloud's metadata service" in outcome.error
        assert "127.0.0.1" not in outcome.error  # the model learns nothing of the network
        [refused] = [e for e in logs if e["event"] == "tool.internal_address"]
        assert (refused["tool"], refused["bot"], refused["host"], refused["address"]) == (
            "order", "acme", "api.shop.example", "127.0.0.1")

        # An operator who points a tool at an internal API by its address (or `localhost`) chose it: it is called.
        for url in (f"{base}/v1/orders/{{order_id}}", f"http://localhost:{port}/v1/orders/{{order_id}}"):
            named = await order_tool(url).call("order", {"order_id": "A-1"}, identity=ALICE)
            assert named.error is None and named.result == {"secret": "instance-credentials"}
    assert asked == ["/v1/orders/A-1", "/v1/orders/A-1"]


async def test_an_http_tools_redirect_is_not_followed():
    # A public API (or one an attacker answers for) redirecting to the metadata service: the tool reports the
    # status, and the redirect's target is never asked.
    async with internal_service() as (base, asked):
        outcome = await order_tool(f"{base}/redirect/{{order_id}}").call("order", {"order_id": "A-1"}, identity=ALICE)
    assert outcome.error == "the service answered HTTP 302"
    assert asked == ["/redirect/A-1"]


async def test_an_argument_meant_to_change_the_host_stays_inside_its_path_segment_or_query_value():
    # `@` (userinfo), `//` (a network path), `\\` (read as `/` by some parsers), an encoded `/` and CRLF (a header
    # of its own): each is percent-encoded where it stands, so the call reaches the configured server and path.
    tricks = ["@169.254.169.254", "//169.254.169.254/latest", "\\\\169.254.169.254", "..%2f..%2fadmin",
              "x\r\nHost: 169.254.169.254", "http://169.254.169.254/"]
    async with internal_service() as (base, asked):
        tool = BotTools(BotSettings(name="acme", tools=[{
            "name": "order", "type": "http", "url": base + "/v1/orders/{order_id}?q={q}",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "q": {"type": "string"}}}}]))
        for trick in tricks:
            outcome = await tool.call("order", {"order_id": trick, "q": trick}, identity=ALICE)
            assert outcome.error is None, (trick, outcome.error)
    assert asked == [
        "/v1/orders/%40169.254.169.254?q=%40169.254.169.254",
        "/v1/orders/%2F%2F169.254.169.254%2Flatest?q=%2F%2F169.254.169.254%2Flatest",
        "/v1/orders/%5C%5C169.254.169.254?q=%5C%5C169.254.169.254",
        "/v1/orders/..%252f..%252fadmin?q=..%252f..%252fadmin",
        "/v1/orders/x%0D%0AHost%3A%20169.254.169.254?q=x%0D%0AHost%3A%20169.254.169.254",
        "/v1/orders/http%3A%2F%2F169.254.169.254%2F?q=http%3A%2F%2F169.254.169.254%2F",
    ]


async def test_an_http_tool_cannot_be_given_a_client_that_skips_the_address_check(dns_answers):
    """`BotTools(bot, http=client)` sent every call through that client instead of the guarded one made per call, so
    a host that resolved to this machine was called; nothing passed one, and nothing can now."""
    async with internal_service() as (base, asked):
        dns_answers["api.shop.example"] = "127.0.0.1"
        url = f"http://api.shop.example:{base.rsplit(':', 1)[1]}/admin/purge/{{order_id}}"
        with pytest.raises(TypeError):
            async with httpx.AsyncClient() as client:
                BotTools(BotSettings(name="acme", tools=[{"name": "order", "type": "http", "url": url,
                                                          "parameters": ORDER}]), http=client)
        outcome = await order_tool(url).call("order", {"order_id": "A-1"}, identity=ALICE)
        assert outcome.error is not None and asked == []
