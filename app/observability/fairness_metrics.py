"""Per-model series of the engine's fair share between tenants, read at scrape time from
the snapshot each engine publishes (app.services.generation.fairness). Aggregates only: no label
names a tenant, so the series stay as many as the served models."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.schemas.fairness import ModelFairness
from app.services.generation.fairness import FairnessView

# (name, help, the value of one model's snapshot)
_SERIES: tuple[tuple[str, str, Callable[[ModelFairness], float]], ...] = (
    (
        "lilac_fair_share_active_tenants",
        "Tenants with requests waiting or running in the engine",
        lambda m: float(sum(1 for t in m.tenants if t.active)),
    ),
    (
        "lilac_fair_share_tenants",
        "Tenants active in the engine or served in the last minute",
        lambda m: float(len(m.tenants)),
    ),
    (
        "lilac_fair_share_top_tenant_share",
        "The largest tenant's share of the engine's weighted service in the last minute",
        lambda m: max((t.share_last_minute for t in m.tenants), default=0.0),
    ),
    (
        "lilac_fair_share_max_engine_queue_wait_seconds",
        "The longest of the tenants' mean waits in the engine's queue over the last minute",
        lambda m: max((t.engine_queue_wait_s for t in m.tenants), default=0.0),
    ),
    (
        "lilac_fair_share_counter_spread",
        "How far the most-served active tenant's service counter is ahead of the least-served "
        "one's (weighted tokens / weight)",
        lambda m: max((t.counter for t in m.tenants if t.active), default=0.0),
    ),
    (
        "lilac_fair_share_stale",
        "1 when the engine's snapshot is missing or old while the model has requests",
        lambda m: float(m.stale),
    ),
)


class FairnessCollector(Collector):
    """Nothing while the fair scheduler is off (`--fair-share false`)."""

    def __init__(self, view: FairnessView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        if not self._view.fair_share:
            return
        snapshots = self._view.report().data
        for name, text, value in _SERIES:
            family = GaugeMetricFamily(name, text, labels=["model"])
            for snapshot in snapshots:
                family.add_metric([snapshot.model], value(snapshot))
            yield family
