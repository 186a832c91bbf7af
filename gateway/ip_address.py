"""An IP address as the gateway's address rules read it (the web chat's per-address limit, the crawl's and the
http tools' refused addresses), an IPv4 address written as IPv6 read as that IPv4 address: the one place that says
which addresses an address may reach (`reachable_addresses`), which are public (`is_public`) and which a fetch
must never read from (`off_limits_address`)."""

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


def under_local_use_prefix(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `ip` is under NAT64's local-use prefix (64:ff9b:1::/48), whose length within it it does not tell."""
    return isinstance(ip, ipaddress.IPv6Address) and ip in _NAT64_LOCAL


def local_use_readings(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Each IPv4 address a translator of NAT64's local-use prefix (64:ff9b:1::/48) may read in `ip`: one for each
    length RFC 6052 gives its prefix within it, /48, /56, /64 and /96 (bits 64-71 are never the address's), which
    is the network's choice and not told by the address; () for an address outside it. A translator ignores the
    bits after the IPv4 address (RFC 6052 2.2), so they are ignored here too. Why every length: a rule reading
    the /96 alone passed 64:ff9b:1:0:a9:fea9:fe00:0, 169.254.169.254 to a translator on a /64. The well-known
    prefix is a /96 and nothing else (RFC 6052 2.1), and any other prefix a network translates (one of its own,
    2001:db8:122:344::/64) cannot be told from the address: neither is read so."""
    if not under_local_use_prefix(ip):
        return ()
    b = ip.packed
    return tuple(ipaddress.IPv4Address(bytes(octets))
                 for octets in (b[6:8] + b[9:11], b[7:8] + b[9:12], b[9:13], b[12:16]))


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
"""No translator forwards to it (RFC 1122 3.2.1.3): a reading of the local-use prefix there is none (at the lengths
the network does not use, the prefix's zeros read so)."""


def reachable_addresses(ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
                        ) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """Each address a connection to `ip` may reach: under NAT64's local-use prefix, each reading a translator may
    make of it (`local_use_readings`) outside 0.0.0.0/8 (`_THIS_NETWORK`), () when every one is there; else the
    IPv4 address it carries, or itself (`carried_ipv4`)."""
    if readings := local_use_readings(ip):
        return tuple(reading for reading in readings if reading not in _THIS_NETWORK)
    return (carried_ipv4(ip),)


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether every address `ip` may reach (`reachable_addresses`) is a public one; one that reaches none is not.
    Why every reading under the local-use prefix: read as a /96 alone, 127.0.0.1 or 169.254.169.254 at a /48, /56
    or /64 with other bits after it was a public address while `off_limits_address` refused it."""
    reachable = reachable_addresses(ip)
    return bool(reachable) and all(address.is_global for address in reachable)


_METADATA_ADDRESSES = frozenset({ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")})
"""Cloud metadata services outside the link-local range (Alibaba's; AWS's over IPv6)."""


def off_limits_address(address: str) -> bool:
    """True for an address a fetch for a site named by a public host must never read from: one that may reach
    (`reachable_addresses`) this machine (loopback, unspecified), the link (link-local: the cloud metadata service
    at 169.254.169.254) or the metadata services at other addresses. Private networks are not: an intranet wiki
    lives there. Under NAT64's local-use prefix 0.0.0.0 is no reading: a translator's IPv4 side forwards nothing
    to it, and every address of a network on a /48 or /56 prefix reads so at /96."""
    ip = ip_of(address)
    return ip is not None and any(
        reached.is_loopback or reached.is_unspecified or reached.is_link_local or reached in _METADATA_ADDRESSES
        for reached in reachable_addresses(ip))
