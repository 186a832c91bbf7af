"""An IP address as the gateway's address rules read it (the web chat's per-address limit, the crawl's
refused addresses)."""

from __future__ import annotations

import ipaddress


def ip_of(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address without a zone (`fe80::1%eth0`), an IPv4-mapped one as IPv4 (`::ffff:127.0.0.1` is
    127.0.0.1, which a rule on IPv4 addresses must see as such); None when it is none (a host name)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    return getattr(ip, "ipv4_mapped", None) or ip
