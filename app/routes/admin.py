"""Operator routes of the admission controller; every one needs the admin key.

Without `--admin-key` configured they answer 403: an unset key must never mean "open".
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request, get, post
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException

from engine.admission.runtime import AdmissionController


def _controller(request: Request) -> AdmissionController:
    expected: str | None = request.app.state.settings.admin_key
    if not expected:
        raise PermissionDeniedException("Admin routes are disabled: start with --admin-key.")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), expected):
        raise NotAuthorizedException("A valid admin key is required (Authorization: Bearer).")
    return request.app.state.admission


@get("/admin/admission")
async def admission_status(request: Request) -> dict[str, Any]:
    return _controller(request).snapshot()


@post("/admin/admission/drain", status_code=200)
async def admission_drain(request: Request) -> dict[str, Any]:
    """Stop lending until /resume: in-flight requests get the grace period."""
    controller = _controller(request)
    await controller.drain()
    return controller.snapshot()


@post("/admin/admission/resume", status_code=200)
async def admission_resume(request: Request) -> dict[str, Any]:
    """Lift an operator drain; the owner's activity and lending windows still apply."""
    controller = _controller(request)
    await controller.resume()
    return controller.snapshot()
