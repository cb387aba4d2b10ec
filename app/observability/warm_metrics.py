"""Per-model series of the served models (`engine.warm`): state, wakes, wake latency
and the requests that waited for a wake. State and counts are read from the pool at
scrape time; the latency histogram is observed once per wake."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.warm.model import ModelState, WarmModel
from engine.warm.pool import ModelPool

# A pause stand-in wakes in milliseconds; vLLM's sleep mode in 0.3-3 s for models up
# to 8B; anything slower is a problem worth seeing.
_WAKE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30)


class WarmCollector(Collector):
    def __init__(self, pool: ModelPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "lilac_model_state",
            "1 for the state each served model is in",
            labels=["model", "state"],
        )
        wakes = CounterMetricFamily(
            "lilac_model_wakes", "Wakes of each served model", labels=["model"]
        )
        waiters = CounterMetricFamily(
            "lilac_model_wake_waiters",
            "Requests that waited for their model to wake",
            labels=["model"],
        )
        for model in self._pool.models:
            for each in ModelState:
                state.add_metric([model.name, str(each)], float(model.state is each))
            wakes.add_metric([model.name], float(model.wakes))
            waiters.add_metric([model.name], float(model.waiters))
        yield state
        yield wakes
        yield waiters


class WarmMetrics:
    def __init__(self, registry: CollectorRegistry, pool: ModelPool) -> None:
        registry.register(WarmCollector(pool))
        self.wake_seconds = Histogram(
            "lilac_model_wake_seconds",
            "From a wake's start (its first waiter) to the model awake",
            ["model"],
            buckets=_WAKE_BUCKETS,
            registry=registry,
        )
        pool.observers.append(self.observe)

    def observe(self, what: str, model: WarmModel, seconds: float) -> None:
        if what == "wake":
            self.wake_seconds.labels(model.name).observe(seconds)
