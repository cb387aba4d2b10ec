"""Which addresses an image URL may reach: globally routable unicast ones only."""

from __future__ import annotations

import ipaddress

import pytest

from app.services.images.addresses import is_public


@pytest.mark.parametrize(
    "address",
    [
        "fec0::1",  # site-local
        "feff:ffff::1",  # the top of fec0::/10
        "3fff::1",  # documentation (RFC 9637)
        "3fff:0fff:ffff::1",  # the top of 3fff::/20
        "2001:db8::1",  # documentation
        "::ffff:10.0.0.1",
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "fe80::1",
        "fe7f:ffff::1",  # reserved (fe00::/9), just below link-local
        "fd00::1",
        "::1",
        "ff02::1",
    ],
)
def test_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "2606:4700::1111",
        "2a00:1450:4001::200e",
        "3fff:1000::1",  # just past 3fff::/20
        "93.184.216.34",
        "64:ff9b::5db8:d822",  # NAT64 of a public IPv4 address
    ],
)
def test_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))
