"""vLLM's Prometheus stat logger for several engines in one process.

`PrometheusStatLogger` makes its metric objects in prometheus_client's default
registry and first unregisters every `vllm:` collector there, so a second engine's
logger would take the first's series off `/metrics`. This logger makes each metric
once per process and hands every engine the same object: each engine labels its own
child (`model_name` is its served name, as `vllm serve` labels it), and the objects
are registered again after each logger's start, so one scrape has every model's
series under vLLM's names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from vllm.v1.metrics.loggers import PrometheusStatLogger

_SHARED: dict[str, Any] = {}


def _shared(kind: type[Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        name = kwargs["name"] if "name" in kwargs else args[0]
        metric = _SHARED.get(name)
        if metric is None:
            metric = _SHARED[name] = kind(*args, **kwargs)
        return metric

    return make


def _register_again() -> None:
    registered = set(REGISTRY._collector_to_names)  # prometheus_client has no public view
    for metric in _SHARED.values():
        if metric not in registered:
            REGISTRY.register(metric)


class SharedPrometheusStatLogger(PrometheusStatLogger):
    # Factories where vLLM expects the classes: it only calls them.
    _gauge_cls = staticmethod(_shared(Gauge))  # type: ignore[assignment]
    _counter_cls = staticmethod(_shared(Counter))  # type: ignore[assignment]
    _histogram_cls = staticmethod(_shared(Histogram))  # type: ignore[assignment]

    def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
        super().__init__(vllm_config, engine_indexes)
        _register_again()

    def log_engine_initialized(self) -> None:
        super().log_engine_initialized()
        _register_again()
