"""Probes and metrics: what load balancers and Prometheus read."""

from __future__ import annotations

from app.openapi.common import Route

ROUTES = (
    Route(
        "get",
        "/health",
        "Ready and admitting",
        ok={"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]},
        errors=("503",),
    ),
    Route(
        "get",
        "/health/live",
        "Alive: the process and engine are healthy, yielded or not",
        ok={"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]},
        errors=("503",),
    ),
    Route(
        "get",
        "/metrics",
        "Prometheus metrics",
        ok={"type": "string"},
        ok_media="text/plain",
        errors=(),
    ),
)
