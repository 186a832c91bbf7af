"""Where a crawl may go: the site of a URL, the addresses that are this machine or its network, and the
address a fetch actually reached (`rag.crawl` explains the rules these serve)."""

from __future__ import annotations

import ipaddress
import socket
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

import httpcore
import httpx

from gateway.errors import SourceError
from gateway.ip_address import is_public, off_limits_address

_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_site(url: str, other: str) -> bool:
    """True when `other` is on `url`'s site: the same host (a `www.` prefix aside) and the same port,
    or each on its scheme's default port (so http → https stays on the site)."""
    a, b = urlsplit(url), urlsplit(other)
    if b.scheme not in _DEFAULT_PORTS or not a.hostname or not b.hostname:
        return False
    if a.hostname.removeprefix("www.") != b.hostname.removeprefix("www."):
        return False
    try:
        port_a, port_b = a.port or _DEFAULT_PORTS.get(a.scheme), b.port or _DEFAULT_PORTS[b.scheme]
    except ValueError:  # a port that is not a number
        return False
    same_port = a.scheme == b.scheme and port_a == port_b  # not https → http on port 443
    return same_port or (port_a == _DEFAULT_PORTS.get(a.scheme) and port_b == _DEFAULT_PORTS[b.scheme])


def internal_host(url: str) -> bool:
    """True when `url` names this machine or a private network by address (`127.0.0.1`, `10.0.0.5`,
    `169.254.169.254`, `[::1]`, `[::ffff:127.0.0.1]`, `2130706433`: one that is not `is_public`, which reads
    NAT64's local-use prefix at each length as `off_limits_address` does) or as `localhost`. A name that resolves
    to one is not seen here. Why every length: a public site's robots.txt could redirect the crawl to an address
    refused by `off_limits_address` that a /96 alone read as public."""
    return _internal_name(urlsplit(url).hostname or "")


def _internal_name(host: str) -> bool:
    """`internal_host` of a host as a URL names it (an IPv6 address without its brackets)."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:  # the shorthand the resolver reads as an IPv4 address too: 2130706433, 0x7f.1, 127.1
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return False
    return not is_public(address)


def check_peer(url: str, response: httpx.Response) -> None:
    """Refuse an answer that came from an `off_limits_address` while `url` (what was configured, or the
    page the sitemap listed) names no internal address itself: its name resolved there. Through a proxy
    the address is the proxy's, and the proxy resolves the name, so there is nothing to check here."""
    stream = response.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if not peer or internal_host(url) or _proxied(response.request.url):
        return
    if off_limits_address(str(peer[0])):
        raise SourceError(f"{response.request.url}: {response.request.url.host} resolved to {peer[0]}, an address "
                          "of this machine or of the cloud's metadata service; not read")


def _proxied(url: httpx.URL) -> bool:
    """Whether the environment sends `url` through a proxy (httpx reads the same variables)."""
    proxies = urllib.request.getproxies()
    return bool(proxies.get(url.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(url.host)


def crawl_client(**options) -> httpx.AsyncClient:
    """The ingest's client (`httpx.AsyncClient(**options)`): its direct connections refuse, before a byte of the
    request is sent, a connection that a host not naming an internal address itself reached an
    `off_limits_address` on (its name resolved there). Why: `check_peer` kept such an answer out of the knowledge
    base, but the GET had reached the service by then, path and query included, and a GET alone acts on many an
    internal endpoint (an admin port's /shutdown, a cache purge). The environment's proxies (`_proxied`) are
    used as httpx uses them, their connections untouched: a client given a transport of its own ignores them,
    and an ingest behind a proxy connected directly, which a network whose only way out is its proxy refuses."""
    return guarded_client(lambda host, address: SourceError(
        f"{host} resolved to {address}, an address of this machine or of the cloud's metadata service; not read "
        "(nothing was sent to it)"), **options)


def guarded_client(refusal: Callable[[str, str], Exception], **options) -> httpx.AsyncClient:
    """`httpx.AsyncClient(**options)` whose direct connections refuse a host that names no internal address
    itself but reached an `off_limits_address`, raising `refusal(host, address)` before a byte is sent
    (`crawl_client` says why; an http tool's calls use it too)."""
    client = httpx.AsyncClient(**options)
    # httpx takes no network backend of its own; the default transport's connection pool (httpcore's) does.
    pool = client._transport._pool
    pool._network_backend = _PeerCheckingBackend(pool._network_backend, refusal)
    return client


class _PeerCheckingBackend(httpcore.AsyncNetworkBackend):
    """Connects as `backend` does, then closes (raising `refusal(host, address)`) a connection `guarded_client`
    refuses."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend, refusal: Callable[[str, str], Exception]) -> None:
        self._backend = backend
        self._refusal = refusal

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options=None) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                                 socket_options=socket_options)
        peer = stream.get_extra_info("server_addr")
        if peer and not _internal_name(host) and off_limits_address(str(peer[0])):
            await stream.aclose()
            raise self._refusal(host, str(peer[0]))
        return stream

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options=None) -> httpcore.AsyncNetworkStream:
        return await self._backend.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)
