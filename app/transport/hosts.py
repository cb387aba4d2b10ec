"""Which `Host` headers a server that checks no key answers.

A server without keys bound to loopback trusts whoever can reach it; a web page can
still reach it by pointing a name it controls at 127.0.0.1 (DNS rebinding), and its
requests then carry that name in `Host`. So without keys only these are answered:
loopback names (`localhost` and its subdomains), IP literals, the address the server is
bound to and the names the operator adds (`--allowed-hosts`); any other `Host`, or
none, gets a 403 in OpenAI's error envelope. With keys every request proves itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from app.errors import APIError
from app.errors.handlers import send_error

OPEN_PATHS = frozenset({"/health", "/health/live"})  # probes address the pod by any name


class HostNotAllowed(APIError):
    status_code = 403
    error_type = "permission_error"

    def __init__(self) -> None:
        super().__init__(
            "This server answers only requests addressed to it by a loopback name, an IP "
            "address or a name in --allowed-hosts.",
            code="host_not_allowed",
        )


def host_name(header: bytes) -> str:
    """The name of a `Host` header's value, lower case, without its port."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):  # [::1]:8000
        return text[1 : text.find("]")] if "]" in text else ""
    name, _, _ = text.partition(":")
    return name.rstrip(".")


class AllowedHosts:
    def __init__(self, bound: str, extra: Iterable[str] = ()) -> None:
        self.names = {bound.lower(), *(name.lower().rstrip(".") for name in extra)}

    def allows(self, header: bytes | None) -> bool:
        if header is None:
            return False
        name = host_name(header)
        if not name:
            return False
        if name in self.names or name == "localhost" or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


class HostGuard:
    """ASGI middleware: a request whose `Host` is not allowed gets a 403."""

    def __init__(self, app: Any, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS:
            header = next((v for k, v in scope["headers"] if k == b"host"), None)
            if not self.hosts.allows(header):
                await send_error(send, scope.get("path", ""), HostNotAllowed())
                return
        await self.app(scope, receive, send)
