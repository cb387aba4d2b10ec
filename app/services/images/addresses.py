"""Which network addresses an image URL may reach: only globally routable unicast ones.

An IPv6 address that carries an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo)
reaches that IPv4 address through a gateway, so the IPv4 address inside decides.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards to.
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# Not globally routable, yet `is_global` in some Python versions: site-local (deprecated,
# still routed inside some sites) and the documentation prefixes (2001:db8::/32 is
# already known to Python; 3fff::/20 came later).
_NOT_GLOBAL_V6 = (
    ipaddress.IPv6Network("fec0::/10"),
    ipaddress.IPv6Network("3fff::/20"),
    ipaddress.IPv6Network("2001:db8::/32"),
)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through: IPv4-mapped (::ffff:0:0/96),
    IPv4-compatible (::/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4 (2002::/16) or
    Teredo (2001::/32, the client's address); None for a plain IPv6 address."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _IPV4_COMPATIBLE or any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """A globally routable unicast address: not private, loopback, link-local,
    site-local, documentation, shared, reserved, multicast or unspecified, and not
    carrying an IPv4 address that is not (an IPv6 address wrapping one is judged as it
    and as itself)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            # The wrapping prefixes themselves are not global (NAT64's well-known one is,
            # to Python): the IPv4 address inside decides.
            return _plainly_public(inner)
    return _plainly_public(address)


def _plainly_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and any(address in net for net in _NOT_GLOBAL_V6):
        return False
    return address.is_global and not (address.is_multicast or address.is_reserved)
