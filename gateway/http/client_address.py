"""Who is asking, for the web chat's per-address limit (`channels.web.per_address_per_minute`).

The web chat's contact is a session id the caller picks, so only the client's address bounds a caller.
That address must be one the caller cannot choose anew for each message:
- With `FORWARDED_ALLOW_IPS` set (uvicorn's own setting, read by `serve`), it names the proxies: uvicorn
  gives a request through one of them the visitor's address as its peer, and any other peer is a client,
  whose `X-Forwarded-For` is its own and is not read. Set but empty, no peer is a proxy.
- Unset (uvicorn then trusts only loopback), `X-Forwarded-For` is read from a peer on a private or
  loopback network, where a proxy sits, so a proxy on a docker or cloud network needs no setting; its last
  hop is the one that proxy appended, which a client cannot choose through it. A peer on a public address
  is the client itself, and wrote a new header for every message. A proxy on a public address (a CDN)
  goes in `FORWARDED_ALLOW_IPS`; so does any proxy once a client may reach the gateway from a private
  network without one (a load balancer that hides the client's address, a host beside the gateway).
- An IPv6 address counts by its /64: one subscriber gets a whole /64, 2^64 addresses to send from; one
  that carries an IPv4 address (NAT64 `64:ff9b::cb00:7107`, 6to4 `2002:cb00:7107::/48`) counts as that address,
  and one under NAT64's local-use prefix (`64:ff9b:1::/48`, whose length the address does not tell) as itself.
- A hop's port, which some proxies write (`203.0.113.7:51234`), is left out: it is new with each connection.
"""

from __future__ import annotations

import ipaddress
import os
import re

from fastapi import Request

from gateway.ip_address import carried_ipv4, ip_of, under_local_use_prefix

IPV6_SUBSCRIBER_PREFIX = 64


def forwarded_trust_warning() -> str | None:
    """What is wrong with `FORWARDED_ALLOW_IPS`, for a warning at start: `*` makes uvicorn take the
    header's first hop, which the client writes, as the peer, so every message could bring its own budget."""
    if "*" in (os.environ.get("FORWARDED_ALLOW_IPS") or "").split(","):
        return ("FORWARDED_ALLOW_IPS=* trusts X-Forwarded-For from anyone, so a web chat client can pick a new "
                "address (and a fresh per-address budget) for every message; list your proxies' addresses instead")
    return None


def proxies_named() -> bool:
    """Whether `FORWARDED_ALLOW_IPS` is set: then uvicorn has dealt with every proxy it names (module docstring)."""
    return os.environ.get("FORWARDED_ALLOW_IPS") is not None


def client_address(request: Request) -> str:
    """The budget key of the request's client: its network (`budget_key`) and, behind a proxy, the
    network of the address that proxy saw."""
    peer = request.client.host
    if proxies_named() or not may_be_a_proxy(peer):
        return budget_key(peer)
    # Every line of it, as one list: a proxy may add a line of its own (HAProxy) after the client's.
    forwarded = ",".join(request.headers.getlist("x-forwarded-for"))
    last_hop = _without_port(forwarded.rsplit(",", 1)[-1].strip()[:64])
    return f"{peer}|{budget_key(last_hop)}" if last_hop else budget_key(peer)


_WITH_PORT = re.compile(r"\[([0-9A-Fa-f:.%\w]+)\](?::\d+)?|(\d{1,3}(?:\.\d{1,3}){3}):\d+")


def _without_port(hop: str) -> str:
    """A hop as its address: some proxies write the client's port too (`203.0.113.7:51234`,
    `[2001:db8::1]:443`), which is new with each connection, so each one counted as another client."""
    match = _WITH_PORT.fullmatch(hop)
    return (match.group(1) or match.group(2)) if match else hop


def budget_key(address: str) -> str:
    """`address` as one client's budget: an IPv6 address as its /64 network, one that carries an IPv4 address
    (NAT64, 6to4: `carried_ipv4`) as that address, one under NAT64's local-use prefix as the whole address,
    anything else as given. Why: behind NAT64 every IPv4 visitor is in 64:ff9b::/96, one /64 whose budget one of
    them used up; a 6to4 host has a /48. The local-use prefix (64:ff9b:1::/48) may be a /48, /56, /64 or /96
    within it, which the address does not tell (`under_local_use_prefix`): read as a /96, every visitor behind a /48
    or /56 was 0.0.0.0, and behind a /64 its last octet and three zeros; by its /64, a /48's or /56's visitor
    shares it with a /16 or a /8 of IPv4 addresses, and a /64's or /96's with all. Its translator writes each
    IPv4 visitor as one address, and no other host can answer from one (it routes to the translator), so the
    whole address is the visitor's, whatever the length."""
    ip = ip_of(address)
    if ip is None or ip.version == 4:
        return address
    if under_local_use_prefix(ip):
        return str(ip)
    if (carried := carried_ipv4(ip)).version == 4:
        return str(carried)
    return str(ipaddress.IPv6Network((ip, IPV6_SUBSCRIBER_PREFIX), strict=False))


def may_be_a_proxy(peer: str) -> bool:
    """True for an address a proxy in front of the gateway has: loopback, private or link-local (a name,
    as a test client gives, counts too)."""
    ip = ip_of(peer)
    return ip is None or ip.is_private or ip.is_loopback or ip.is_link_local
