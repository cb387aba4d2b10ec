"""Prometheus metrics of one app instance (own registry, so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from engine.protocol import ModelHost


def build_registry(engine: ModelHost) -> CollectorRegistry:
    registry = CollectorRegistry()
    ready = Gauge("lilac_engine_ready", "1 when the engine accepts requests", registry=registry)
    ready.set_function(lambda: float(engine.is_ready()))
    unfinished = Gauge(
        "lilac_engine_unfinished_requests",
        "Requests the engine holds (running or waiting)",
        registry=registry,
    )
    unfinished.set_function(lambda: float(engine.unfinished_requests()))
    return registry
