"""An IP address as the gateway's address rules read it (the web chat's per-address limit, the crawl's
refused addresses), an IPv4 address written as IPv6 read as that IPv4 address."""

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


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): on a network with NAT64, 64:ff9b::a9fe:a9fe *is* 169.254.169.254."""
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
"""NAT64's local-use prefix (RFC 8215): a network's own translator, whose prefix length within it the address does
not tell; `local_use_readings` reads it at every length, so it stands for no one IPv4 address (`carried_ipv4`)."""
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
"""IPv4-compatible addresses (RFC 4291, deprecated): `::7f00:1` is 127.0.0.1 where the kernel still tunnels them."""


def carried_ipv4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv6 one stands for, the way it reaches it: IPv4-mapped (`::ffff:127.0.0.1`),
    NAT64 (`64:ff9b::7f00:1`; the local-use prefix is read by `local_use_readings`), 6to4 (`2002:a9fe:a9fe::`),
    Teredo's client (`2001:0:…:80ff:fffe`, stored inverted) or IPv4-compatible (`::7f00:1`, but `::` and `::1`,
    IPv6's own unspecified and loopback addresses); else `ip` itself. Why: a rule on IPv4 addresses
    (loopback, link-local) passed over each of them, and each reaches that IPv4 address where it routes."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None) or ip


def local_use_readings(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Each IPv4 address a translator of NAT64's local-use prefix (64:ff9b:1::/48) may read in `ip`: one for each
    length RFC 6052 gives its prefix within it, /48, /56, /64 and /96 (bits 64-71 are never the address's), which
    is the network's choice and not told by the address; () for an address outside it. A translator ignores the
    bits after the IPv4 address (RFC 6052 2.2), so they are ignored here too. Why every length: a rule reading
    the /96 alone passed 64:ff9b:1:0:a9:fea9:fe00:0, 169.254.169.254 to a translator on a /64. The well-known
    prefix is a /96 and nothing else (RFC 6052 2.1), and any other prefix a network translates (one of its own,
    2001:db8:122:344::/64) cannot be told from the address: neither is read so."""
    if not isinstance(ip, ipaddress.IPv6Address) or ip not in _NAT64_LOCAL:
        return ()
    b = ip.packed
    return tuple(ipaddress.IPv4Address(bytes(octets))
                 for octets in (b[6:8] + b[9:11], b[7:8] + b[9:12], b[9:13], b[12:16]))
