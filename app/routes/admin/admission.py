"""Operator routes of the admission controller; every one needs the admin key.

The key is checked by a guard (`AdminKeyGuard`) on the router `admin_router` builds,
before any handler runs. Without an admin key configured the routes answer 403: an
unset key must never mean "open". The key is compared in constant time (digests of
equal length), any header text (non-ASCII included) is a 401 when wrong, and each
client's failed attempts are answered ever more slowly (`FailureBackoff`), so that
guessing costs time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections import OrderedDict
from typing import Any

from litestar import Router, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from app.routes.deps import AdmissionDep


class FailureBackoff:
    """A delay before answering each client's failed attempt: `first_s`, doubling with
    each failure up to `max_s`; forgotten `forget_s` after a client's last failure or on
    its success. At most `max_clients` are remembered (the oldest go first)."""

    def __init__(
        self,
        first_s: float = 0.1,
        max_s: float = 5.0,
        forget_s: float = 300.0,
        max_clients: int = 10_000,
    ) -> None:
        self.first_s, self.max_s, self.forget_s = first_s, max_s, forget_s
        self.max_clients = max_clients
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def failed(self, client: str) -> float:
        """Record a failure of `client`; the seconds to wait before answering it."""
        now = time.monotonic()
        count, last = self._failures.pop(client, (0, now))
        if now - last > self.forget_s:
            count = 0
        self._failures[client] = (count + 1, now)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
        return min(self.max_s, self.first_s * 2**count)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _header_bytes(text: str) -> bytes:
    """The bytes a header value was sent as (ASGI servers decode headers as Latin-1),
    so that a key with non-ASCII characters compares as its UTF-8 bytes."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


class AdminKeyGuard:
    """Admits a request only with `Authorization: Bearer <admin key>`."""

    def __init__(self, admin_key: str | None, backoff: FailureBackoff | None = None) -> None:
        self._digest = _digest(admin_key.encode()) if admin_key else None
        self.backoff = backoff or FailureBackoff()

    async def __call__(
        self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
    ) -> None:
        if self._digest is None:
            raise PermissionDeniedException(
                "Admin routes are disabled: start with an admin key "
                "(LILAC_ADMIN_KEY or --admin-key-file)."
            )
        header = connection.headers.get("authorization", "")
        scheme, _sep, token = header.partition(" ")
        # Digests of equal length: the comparison takes the same time whatever was sent.
        matches = hmac.compare_digest(_digest(_header_bytes(token.strip())), self._digest)
        client = connection.client.host if connection.client else "unknown"
        if scheme.lower() != "bearer" or not matches:
            await asyncio.sleep(self.backoff.failed(client))
            raise NotAuthorizedException("A valid admin key is required (Authorization: Bearer).")
        self.backoff.succeeded(client)


@get("/")
async def admission_status(admission: AdmissionDep) -> dict[str, Any]:
    return admission.snapshot()


@post("/drain", status_code=200)
async def admission_drain(admission: AdmissionDep) -> dict[str, Any]:
    """Stop lending until /resume: in-flight requests get the grace period."""
    await admission.drain()
    return admission.snapshot()


@post("/resume", status_code=200)
async def admission_resume(admission: AdmissionDep) -> dict[str, Any]:
    """Lift an operator drain; the owner's activity and lending windows still apply."""
    await admission.resume()
    return admission.snapshot()


def admin_router(admin_key: str | None) -> Router:
    """The admin routes under /admin/admission, behind the admin key."""
    return Router(
        path="/admin/admission",
        route_handlers=[admission_status, admission_drain, admission_resume],
        guards=[AdminKeyGuard(admin_key)],
    )
