"""The web chat's per-address limit: a caller who picks a new session id for every message is still bounded."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager

import httpx
import pytest
import structlog.testing
from sqlalchemy import func, select

from gateway.app import create_app
from gateway.settings import load_settings
from storage.models import Message
from tests.conftest import upgrade, write_config


async def _inbound(services) -> int:
    async with services.sessions() as session:
        return (await session.execute(select(func.count()).select_from(Message).where(Message.direction == "in"))).scalar_one()


@asynccontextmanager
async def limited_app(tmp_path, per_minute: int, **bot_keys):
    """The real app with bot `acme`'s web chat limited to `per_minute` messages per address (and the
    other keys of the bot in `bot_keys`)."""
    bot = {"name": "acme", "channels": {"web": {"per_address_per_minute": per_minute}}, **bot_keys}
    settings = load_settings(write_config(tmp_path, bots=[bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    async with app.router.lifespan_context(app):
        yield app



def client_from(app, address: str) -> httpx.AsyncClient:
    """An HTTP client of `app` whose connections come from `address` (a client's, or a proxy's)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 40000)),
                             base_url="http://gateway.test", timeout=30)


async def chat_status(app, peer: str, *, forwarded: str | None = None) -> int:
    """The status of one message to bot `acme`'s web chat from `peer` (with `forwarded` as its X-Forwarded-For),
    in a session of its own, so that only the per-address limit can refuse it."""
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    async with client_from(app, peer) as client:
        return (await client.post("/v1/bots/acme/chat", headers=headers,
                                  json={"session_id": f"s-{uuid.uuid4().hex}", "text": "Hello?"})).status_code


async def test_a_client_address_over_its_limit_gets_429_and_nothing_is_stored(tmp_path):
    async with limited_app(tmp_path, 3) as app:
        services = app.state.services

        async with client_from(app, "203.0.113.5") as rotating, client_from(app, "198.51.100.7") as neighbour:
            statuses = []
            for i in range(4):  # a fresh session id each time: the per-contact limit never sees a repeat
                response = await rotating.post("/v1/bots/acme/chat", json={"session_id": f"rot-{i}", "text": "Hello?"})
                statuses.append(response.status_code)
            assert statuses == [200, 200, 200, 429]
            assert response.headers["Retry-After"] == "60" and "3 messages a minute" in response.json()["error"]
            assert await _inbound(services) == 3  # the refused one was not stored
            other = await neighbour.post("/v1/bots/acme/chat", json={"session_id": "n-1", "text": "Hello?"})
            assert other.status_code == 200
        metrics = (await httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g").get("/metrics")).text
        assert 'gateway_rate_limited_total{bot="acme",scope="address"} 1.0' in metrics


async def test_retries_are_not_counted_and_visitors_behind_a_proxy_each_have_a_budget(tmp_path):
    async with limited_app(tmp_path, 2) as app:
        services = app.state.services
        async with client_from(app, "10.0.0.2") as proxy:  # the proxy's address

            async def post(visitor: str, message_id: str) -> int:
                response = await proxy.post("/v1/bots/acme/chat", headers={"X-Forwarded-For": visitor},
                                            json={"session_id": "s-" + visitor.replace(".", "-"), "text": "Hello?",
                                                  "message_id": message_id})
                return response.status_code

            # The widget re-posts a message with the same id when its stream fails: stored once, never a 429.
            assert [await post("203.0.113.5", "m-1") for _ in range(4)] == [200, 200, 200, 200]
            assert await _inbound(services) == 1
            assert [await post("203.0.113.5", f"m-{i}") for i in (2, 3)] == [200, 429]
            # Another visitor behind the same proxy has a budget of their own.
            assert await post("198.51.100.7", "m-1") == 200


async def test_a_client_on_the_internet_cannot_escape_its_limit_with_a_forged_forwarded_header(tmp_path):
    # A peer on a public address is the client itself, not a proxy: an X-Forwarded-For of its own
    # choosing each time gave it a fresh budget per message (a new session id each time, too).
    async with limited_app(tmp_path, 2) as app:
        statuses = [await chat_status(app, "93.184.216.34", forwarded=f"198.51.100.{i}") for i in range(3)]
        assert statuses == [200, 200, 429]
        assert await _inbound(app.state.services) == 2


@pytest.mark.parametrize(("named", "peer"), [("10.0.0.9,127.0.0.1", "10.0.0.2"), ("", "10.0.0.3")],
                         ids=["a proxy named", "none named"])
async def test_a_private_peer_forwarded_allow_ips_does_not_name_cannot_escape_its_limit_with_a_forged_header(
        tmp_path, monkeypatch, named, peer):
    # With FORWARDED_ALLOW_IPS set, uvicorn gives a request through a proxy it names the visitor's address as
    # its peer; any other peer, a private one too (a host beside the gateway, a load balancer that hides the
    # client's address), wrote its X-Forwarded-For itself: a new one each time was a fresh budget per message.
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", named)
    async with limited_app(tmp_path, 2) as app:
        # A peer of its own in each case: the in-process limiter outlives the app.
        statuses = [await chat_status(app, peer, forwarded=f"198.51.100.{i}") for i in range(3)]
        assert statuses == [200, 200, 429]


async def test_an_ipv6_client_cannot_escape_its_limit_by_moving_within_its_network(tmp_path):
    # One subscriber gets a whole /64 (2^64 addresses): counted per address, each message could come
    # from a new one. Directly and behind a proxy alike, the /64 is the budget's owner.
    async with limited_app(tmp_path, 2) as app:
        assert [await chat_status(app, f"2a00:1450:4001:81a::{i + 1:x}") for i in range(3)] == [200, 200, 429]
        assert [await chat_status(app, "10.0.0.2", forwarded=f"2a02:6b8:0:1::{i + 1:x}")
                for i in range(3)] == [200, 200, 429]
        assert await chat_status(app, "2a00:1450:4001:81b::1") == 200  # the next network is someone else
        # An office's own IPv6 network (a private peer that sent no X-Forwarded-For) counts the same way.
        assert [await chat_status(app, f"fd12:3456:789a:1::{i + 1:x}") for i in range(3)] == [200, 200, 429]


async def test_the_web_chats_refusals_are_said_in_the_bots_words(tmp_path):
    """A 413's and a 429's `error` (which the widget shows) were English whatever the bot's `replies:`."""
    replies = {"web_too_long": "{chars} caracteres; el máximo es {limit}.",
               "web_rate_limited": "Más de {per_minute} mensajes por minuto; espera un minuto."}
    async with limited_app(tmp_path, 1, replies=replies) as app:
        async with client_from(app, "203.0.113.9") as client:
            long = await client.post("/v1/bots/acme/chat", json={"session_id": "es-1", "text": "x" * 4001})
            assert (long.status_code, long.json()["error"]) == (413, "4001 caracteres; el máximo es 4000.")
            statuses = [(await client.post("/v1/bots/acme/chat", json={"session_id": f"es-{i}", "text": "Hola"}))
                        for i in (2, 3)]
            assert [r.status_code for r in statuses] == [200, 429]
            assert statuses[1].json()["error"] == "Más de 1 mensajes por minuto; espera un minuto."


async def test_a_proxy_that_writes_the_clients_port_in_the_forwarded_hop_does_not_give_each_connection_a_budget(tmp_path):
    # Some proxies (Azure Application Gateway, IIS ARR) append "address:port": the client's source port is new
    # with each connection, so each connection counted as another client, and an IPv6 one missed its /64.
    async with limited_app(tmp_path, 2) as app:
        assert [await chat_status(app, "10.0.0.3", forwarded=f"198.51.100.7:{50000 + i}")
                for i in range(3)] == [200, 200, 429]
        assert [await chat_status(app, "10.0.0.3", forwarded=f"[2a02:6b8:0:2::{i + 1:x}]:{50000 + i}")
                for i in range(3)] == [200, 200, 429]


async def test_a_proxy_that_adds_its_own_forwarded_header_line_is_the_one_read(tmp_path):
    # HAProxy's `option forwardfor` adds a header line of its own after the client's; only the first line
    # was read, the one the client wrote, and a new one each message gave a new budget.
    async with limited_app(tmp_path, 2) as app:
        async with client_from(app, "10.0.0.4") as proxied:
            statuses = [(await proxied.post("/v1/bots/acme/chat", json={"session_id": f"lines-{i}", "text": "Hello?"},
                                            headers=[("X-Forwarded-For", f"198.51.100.{i}"),
                                                     ("X-Forwarded-For", "203.0.113.50")])).status_code
                        for i in range(3)]
    assert statuses == [200, 200, 429]


@pytest.mark.parametrize(("value", "warned"), [("*", True), ("10.0.0.5,*", True), ("10.0.0.5", False)])
async def test_trusting_every_proxy_is_warned_about_at_start(tmp_path, monkeypatch, value, warned):
    # uvicorn then takes the header's first hop, which the client writes, as the peer: a budget per message.
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", value)
    settings = load_settings(write_config(tmp_path))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_worker=False, start_scheduler=False, start_channels=False)
    with structlog.testing.capture_logs() as logs:  # after create_app, which configures the logging
        async with app.router.lifespan_context(app):
            pass
    assert any(e["event"] == "http.forwarded_allow_all" and e["log_level"] == "warning" for e in logs) == warned


async def test_an_ipv4_client_written_as_ipv6_is_counted_as_its_ipv4_address(tmp_path):
    # Behind NAT64/SIIT every IPv4 visitor is a 64:ff9b::/96 address, all in one /64: one visitor used up
    # the budget of every IPv4 visitor. A 6to4 host has a /48 of its IPv4 address's, 65,536 /64s to move to.
    async with limited_app(tmp_path, 2) as app:
        assert [await chat_status(app, "64:ff9b::cb00:7107") for _ in range(3)] == [200, 200, 429]  # 203.0.113.7
        assert await chat_status(app, "64:ff9b::c633:6407") == 200  # 198.51.100.7: someone else
        assert [await chat_status(app, f"2002:cb00:7108:{i + 1:x}::1")
                for i in range(3)] == [200, 200, 429]  # 203.0.113.8


@pytest.mark.parametrize(("first", "second"), [
    ("64:ff9b:1:cb00:71:700::", "64:ff9b:1:c633:64:700::"),  # a /48 prefix
    ("64:ff9b:1:cb:0:7107::", "64:ff9b:1:c6:33:6407::"),  # a /56
    ("64:ff9b:1:0:cb:71:700:0", "64:ff9b:1:0:c6:3364:700:0"),  # a /64
    ("64:ff9b:1::cb00:7107", "64:ff9b:1::c633:6407"),  # a /96
], ids=["48", "56", "64", "96"])
async def test_ipv4_clients_behind_a_local_use_translator_each_have_a_budget_whatever_its_prefix_length(
        tmp_path, first, second):
    # 203.0.113.7 and 198.51.100.7 under NAT64's local-use prefix (64:ff9b:1::/48), at the length the network's
    # translator uses. Read as a /96 alone, each client behind a /48 or /56 was 0.0.0.0, and behind a /64 its
    # last octet and three zeros (7.0.0.0 for both): one budget for all of them, which one used up.
    async with limited_app(tmp_path, 2) as app:
        assert [await chat_status(app, first) for _ in range(3)] == [200, 200, 429]
        assert await chat_status(app, second) == 200  # someone else
