"""Operator routes of the admission controller; every one needs the admin key.

The key is checked by a guard (`AdminKeyGuard`) on the router `admin_router` builds,
before any handler runs. Without `--admin-key` configured the routes answer 403: an
unset key must never mean "open".
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Router, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from app.routes.deps import AdmissionDep


class AdminKeyGuard:
    """Admits a request only with `Authorization: Bearer <admin key>`."""

    def __init__(self, admin_key: str | None) -> None:
        self._key = admin_key

    def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not self._key:
            raise PermissionDeniedException("Admin routes are disabled: start with --admin-key.")
        header = connection.headers.get("authorization", "")
        scheme, _sep, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), self._key):
            raise NotAuthorizedException("A valid admin key is required (Authorization: Bearer).")


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
