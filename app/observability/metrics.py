"""Prometheus metrics of one app instance, under `lilac_` (own registry, so tests can
build many apps). /metrics serves these followed by prometheus_client's default
registry, where vLLM's stat logger keeps the `vllm:` series `vllm serve` exports.

Admission's gauges and counters are read from the controller at scrape time (nothing
on the request path); the HTTP series are updated once per request by the middleware;
per-key counters keep their label set bounded (`KeyUsage`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.admission.policy import State
from engine.admission.runtime import AdmissionController
from engine.protocol import ModelHost

# Yield and return take milliseconds (pause) to the grace period (a drain).
_EFFECT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OTHER = "other"


class AdmissionCollector(Collector):
    """The controller's state, the owner's last sample and its counters, at scrape time."""

    def __init__(self, admission: AdmissionController) -> None:
        self._admission = admission

    def collect(self) -> Iterator[Metric]:
        admission = self._admission
        state = GaugeMetricFamily(
            "lilac_admission_state", "1 for the admission state the box is in", labels=["state"]
        )
        for each in State:
            state.add_metric([str(each)], float(admission.state is each))
        yield state
        yield _gauge(
            "lilac_admission_admitting",
            "1 while new requests are admitted",
            float(admission.admitting()),
        )
        sample = admission.last_sample
        yield _gauge(
            "lilac_owner_gpu_utilization_percent",
            "The owner's (foreign) GPU utilization at the last sample",
            sample.foreign_util_pct,
        )
        yield _gauge(
            "lilac_owner_gpu_memory_mib",
            "GPU memory the owner's (foreign) processes held at the last sample",
            sample.foreign_memory_mib,
        )
        yield _gauge(
            "lilac_admission_running",
            "Requests admitted and running",
            float(len(admission.queue.running)),
        )
        yield _gauge(
            "lilac_admission_queue_depth",
            "Requests waiting for admission",
            float(len(admission.queue.waiting)),
        )
        yield from _model_gauges(admission)
        yield _gauge(
            "lilac_admission_engine_paused",
            "1 while the engine is paused (yielded)",
            float(admission.engine_paused),
        )
        counters = admission.counters
        transitions = CounterMetricFamily(
            "lilac_admission_transitions", "State changes, by the state entered", labels=["state"]
        )
        for each in State:
            transitions.add_metric([str(each)], float(counters.get(f"to_{each}", 0)))
        yield transitions
        rejections = CounterMetricFamily(
            "lilac_admission_rejections",
            "Requests refused admission, by reason",
            labels=["reason"],
        )
        for name, count in counters.items():
            if name.startswith("rejected_"):
                rejections.add_metric([name.removeprefix("rejected_")], float(count))
        yield rejections
        yield CounterMetricFamily(
            "lilac_admission_admitted",
            "Requests admitted",
            value=float(counters.get("admitted", 0)),
        )
        yield CounterMetricFamily(
            "lilac_admission_drained_requests",
            "Requests ended because a drain's grace period ran out",
            value=float(counters.get("drained", 0)),
        )
        yield CounterMetricFamily(
            "lilac_owner_interference_seconds",
            "Seconds the owner used the GPU while the engine was not paused",
            value=admission.interference_s,
        )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


# Each model's admission, labelled `model_name` as vLLM labels its `vllm:` series.
_MODEL_GAUGES = (
    ("lilac_admission_model_queue_depth", "Requests waiting for admission to a model", "queued"),
    ("lilac_admission_model_running", "Requests admitted and running on a model", "running"),
    (
        "lilac_admission_model_kv_budget_tokens",
        "A model's KV budget in tokens (its engine's KV cache; 0 or less: unbounded)",
        "kv_budget_tokens",
    ),
    (
        "lilac_admission_model_kv_tokens_in_use",
        "KV tokens the requests admitted on a model may take",
        "kv_tokens_in_use",
    ),
    (
        "lilac_admission_model_concurrency_cap",
        "Running requests a model admits in the current state",
        "concurrency_cap",
    ),
)


def _model_gauges(admission: AdmissionController) -> Iterator[Metric]:
    loads = admission.model_loads()
    for name, documentation, field in _MODEL_GAUGES:
        gauge = GaugeMetricFamily(name, documentation, labels=["model_name"])
        for load in loads:
            gauge.add_metric([load.model], float(getattr(load, field)))
        yield gauge


class UsageWriterCollector(Collector):
    """The usage writer's counters, at scrape time: records committed, spooled (the
    database was down) and set aside as dead letters (the database refused them)."""

    def __init__(self, writer: UsageCounts) -> None:
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        for name, documentation, value in (
            ("lilac_usage_written", "Usage records committed", self._writer.written),
            ("lilac_usage_commits", "Group commits of usage records (each one or more records)",
             self._writer.commits),
            ("lilac_usage_spooled", "Usage records spooled while the database was down",
             self._writer.spooled),
            ("lilac_usage_dead_letter", "Usage records the database refused, set aside",
             self._writer.dead_lettered),
        ):  # fmt: skip
            yield CounterMetricFamily(name, documentation, value=float(value))


class UsageCounts(Protocol):
    written: int
    commits: int
    spooled: int
    dead_lettered: int


class KeyUsage:
    """Requests and tokens per API key id, with at most `max_keys` labels: the first keys
    seen get their own label, every later one counts under `other`."""

    def __init__(self, registry: CollectorRegistry, max_keys: int = 50) -> None:
        self.max_keys = max_keys
        self._labelled: set[str] = set()
        self.requests = Counter(
            "lilac_key_requests", "Requests per API key id", ["key"], registry=registry
        )
        self.prompt_tokens = Counter(
            "lilac_key_prompt_tokens", "Prompt tokens per API key id", ["key"], registry=registry
        )
        self.completion_tokens = Counter(
            "lilac_key_completion_tokens",
            "Completion tokens per API key id",
            ["key"],
            registry=registry,
        )

    def label_for(self, key_id: str) -> str:
        if key_id in self._labelled:
            return key_id
        if len(self._labelled) < self.max_keys:
            self._labelled.add(key_id)
            return key_id
        return OTHER

    def count(self, key_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """One finished request of key `key_id` (its id, never the key itself)."""
        label = self.label_for(key_id)
        self.requests.labels(label).inc()
        self.prompt_tokens.labels(label).inc(prompt_tokens)
        self.completion_tokens.labels(label).inc(completion_tokens)


class ServerMetrics:
    """Everything lilac-serve exports of itself, in `registry`."""

    def __init__(self, engine: ModelHost, admission: AdmissionController) -> None:
        registry = self.registry = CollectorRegistry()
        ready = Gauge("lilac_engine_ready", "1 when the engine accepts requests", registry=registry)
        ready.set_function(lambda: float(engine.is_ready()))
        unfinished = Gauge(
            "lilac_engine_unfinished_requests",
            "Requests the engine holds (running or waiting)",
            registry=registry,
        )
        unfinished.set_function(lambda: float(engine.unfinished_requests()))
        registry.register(AdmissionCollector(admission))
        self.yield_seconds = Histogram(
            "lilac_admission_yield_seconds",
            "From the owner's reclaim to the engine paused (the drain included)",
            buckets=_EFFECT_BUCKETS,
            registry=registry,
        )
        self.return_seconds = Histogram(
            "lilac_admission_return_seconds",
            "Resuming the engine once admitting again",
            buckets=_EFFECT_BUCKETS,
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "lilac_admission_queue_wait_seconds",
            "Time admitted requests waited in the queue",
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.http_requests = Counter(
            "lilac_http_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "lilac_http_request_duration_seconds",
            "HTTP request duration, to the last byte of the response (a whole stream)",
            ["route", "method"],
            buckets=_HTTP_BUCKETS,
            registry=registry,
        )
        self.keys = KeyUsage(registry)
        self._effects = {
            "yield": self.yield_seconds,
            "return": self.return_seconds,
            "queue_wait": self.queue_wait_seconds,
        }
        admission.observers.append(self.observe_admission)

    def observe_admission(self, what: str, seconds: float) -> None:
        histogram = self._effects.get(what)
        if histogram is not None:
            histogram.observe(seconds)

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_duration.labels(route, method).observe(seconds)
