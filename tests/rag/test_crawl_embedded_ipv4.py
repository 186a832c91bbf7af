"""An IPv4 address written as an IPv6 one is still that IPv4 address to the crawl's address rules.

On a network with NAT64 (an IPv6-only cloud host, DNS64), 64:ff9b::a9fe:a9fe *is* the metadata service at
169.254.169.254 and 64:ff9b::7f00:1 this machine's 127.0.0.1 (and so are they under the local-use prefix,
64:ff9b:1::/48); a Teredo address (2001::/32) carries one inverted, a 6to4 address (2002:a9fe:a9fe::) and an
IPv4-mapped one (::ffff:169.254.169.254) carry an IPv4 address too. A site's DNS may answer with any of
them, and a robots.txt may redirect to one."""

from __future__ import annotations

import httpx
import pytest

from gateway.errors import SourceError
from rag.crawl_bounds import internal_host, off_limits_address
from rag.sources import load_sitemap

WRAPPED_INTERNAL = ["64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::169.254.169.254", "::ffff:169.254.169.254",
                    "::ffff:127.0.0.1", "2002:a9fe:a9fe::", "2002:7f00:1::1", "64:ff9b::0:0",
                    # NAT64's local-use prefix (RFC 8215, as a /96), and Teredo (its client address stored inverted)
                    "64:ff9b:1::a9fe:a9fe", "64:ff9b:1:0:0:0:7f00:1", "2001:0:4136:e378:8000:63bf:80ff:fffe",
                    "2001:0:4136:e378:8000:63bf:5601:5601",
                    # IPv4-compatible (RFC 4291, deprecated, still tunnelled where the sit driver is loaded)
                    "::7f00:1", "::169.254.169.254"]


@pytest.mark.parametrize("address", WRAPPED_INTERNAL)
def test_off_limits_address_sees_the_ipv4_address_inside_a_nat64_6to4_or_mapped_one(address):
    assert off_limits_address(address)
    assert internal_host(f"http://[{address}]/latest/meta-data/")


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "64:ff9b::a01:203", "2002:5db8:d822::", "::ffff:93.184.216.34",
                                     "64:ff9b:1::808:808", "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
                                     "::808:808"])
def test_off_limits_address_still_allows_a_public_or_private_ipv4_address_so_wrapped(address):
    # 8.8.8.8, 10.1.2.3 (an intranet wiki's), 93.184.216.34: read as the IPv4 address itself would be.
    assert not off_limits_address(address)


# Under the local-use prefix the IPv4 address sits where the network's translator reads it, at the length its
# prefix has (RFC 6052: /48, /56, /64 or /96 within 64:ff9b:1::/48), which the address does not tell; a translator
# ignores the bits after it. 169.254.169.254 and 127.0.0.1, each at one of the other lengths:
LOCAL_USE_INTERNAL = ["64:ff9b:1:0:a9:fea9:fe00:0",  # /64
                      "64:ff9b:1:0:a9:fea9:fe12:3456",  # /64, with bits after it (read as 254.18.52.86 as a /96)
                      "64:ff9b:1:7f:0:1:abcd:ef01",  # /56 (read as 171.205.239.1)
                      "64:ff9b:1:a9fe:a9:fe00:1234:5678"]  # /48 (read as 18.52.86.120)
# 8.8.8.8 as a /48, 93.184.216.34 as a /56 (each 0.0.0.0 as a /96: every address of such a network was refused),
# 10.1.2.3 as a /64; no length reads any of them as this machine, the link or a metadata address.
LOCAL_USE_ALLOWED = ["64:ff9b:1:808:8:800::", "64:ff9b:1:5d:b8:d822::", "64:ff9b:1:0:a:102:300:0"]


@pytest.mark.parametrize("address", LOCAL_USE_INTERNAL)
def test_off_limits_address_reads_the_local_use_prefix_at_each_length_a_translator_may_use(address):
    assert off_limits_address(address)


@pytest.mark.parametrize("address", [*LOCAL_USE_INTERNAL, "64:ff9b:1:0:7f:0:108:808"])
def test_internal_host_reads_the_local_use_prefix_at_each_length_as_off_limits_address_does(address):
    # Read as a /96 alone, 127.0.0.1 at a /64 with bits after it (64:ff9b:1:0:7f:0:108:808) was 1.8.8.8, a public
    # address: a public site's robots.txt redirecting there was followed, which through a proxy (that resolves and
    # connects, so no address is checked here) reached this machine, or the metadata service at a /48 or /56.
    assert internal_host(f"http://[{address}]/latest/meta-data/")


@pytest.mark.parametrize("address", ["64:ff9b:1:808:8:800::", "64:ff9b:1:5d:b8:d822::"])
def test_internal_host_reads_a_public_address_under_the_local_use_prefix_as_public(address):
    # 8.8.8.8 as a /48, 93.184.216.34 as a /56: 0.0.0.0 as a /96 (read so, every address of such a network was
    # internal), and a reading in 0.0.0.0/8 is none, as no translator forwards there.
    assert not internal_host(f"http://[{address}]/")


@pytest.mark.parametrize("address", LOCAL_USE_ALLOWED)
def test_off_limits_address_allows_a_public_or_private_address_under_the_local_use_prefix_at_any_length(address):
    assert not off_limits_address(address)


def test_off_limits_address_reads_the_well_known_prefix_as_a_96_only():
    # 64:ff9b::/96 is that prefix whole (RFC 6052 2.1); an address beside it in 64:ff9b::/32 is in no translation
    # prefix the gateway can know (as any network-specific one, 2001:db8:122:344::/64), so it is not read at a /64.
    assert not off_limits_address("64:ff9b:0:0:a9:fea9:fe00:0")


@pytest.mark.parametrize("address", ["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "64:ff9b::7f00:1",
                                     # the local-use prefix at a /48, /56 and /64, each a public address as a /96
                                     "64:ff9b:1:a9fe:a9:fe00:1234:5678", "64:ff9b:1:7f:0:1:abcd:ef01",
                                     "64:ff9b:1:0:7f:0:108:808"])
async def test_a_public_sites_robots_txt_cannot_redirect_to_a_wrapped_internal_address(address):
    asked: list[str] = []

    def public_site(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(301, headers={"Location": f"http://[{address}]/latest/meta-data/"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(public_site), timeout=5) as client:
        with pytest.raises(SourceError, match="internal address"):
            await load_sitemap("https://docs.example.com/sitemap.xml", client=client)
    assert asked == ["https://docs.example.com/robots.txt"]
