"""The soak harness's figures: outcomes, failures a fault does not explain, event-loop
lag from the server's histogram, memory per server life, and the faults themselves."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from perf.soak.traffic import Result

LAG_METRIC = "lilac_event_loop_lag_seconds"


@dataclass(slots=True)
class Fault:
    name: str
    started: float  # time.monotonic() when injected
    ended: float | None = None  # when the server answered /health 200 again
    detail: dict[str, Any] = field(default_factory=dict)

    def covers(self, result: Result, margin_s: float) -> bool:
        end = (self.ended if self.ended is not None else math.inf) + margin_s
        return result.started <= end and result.ended >= self.started - margin_s


@dataclass(slots=True)
class Life:
    """One server process, from healthy to the end of the run or a fault that ended it."""

    rss_start: int
    lag_start: dict[float, float]
    rss_end: int | None = None
    lag_end: dict[float, float] | None = None
    unfinished_end: float | None = None


def lag_buckets(metrics_text: str) -> dict[float, float]:
    """Cumulative bucket counts of the loop-lag histogram, by upper bound (empty when the
    server does not export it)."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != LAG_METRIC:
            continue
        for sample in family.samples:
            if sample.name == LAG_METRIC + "_bucket":
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


def lag_quantile(lives: list[Life], q: float) -> float | None:
    """Upper bound of the bucket holding quantile `q` of the lag samples of all lives."""
    total: Counter[float] = Counter()
    for life in lives:
        if life.lag_end is None:
            continue
        for bound, count in life.lag_end.items():
            total[bound] += count - life.lag_start.get(bound, 0.0)
    if not total or total[math.inf] <= 0:
        return None
    wanted = q * total[math.inf]
    return next(bound for bound in sorted(total) if total[bound] >= wanted)


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@dataclass(slots=True)
class Report:
    wall_s: float
    requests: int
    outcomes: dict[str, int]
    outcomes_by_kind: dict[str, dict[str, int]]
    failures_explained_by_faults: int
    unexplained_failures: list[dict[str, Any]]
    bad_inputs_without_4xx: list[dict[str, Any]]
    unfinished_engine_requests_at_end: float | None
    event_loop_lag_p99_s: float | None
    event_loop_lag_max_bucket_s: float | None
    health_latency_p50_s: float | None
    health_latency_p99_s: float | None
    memory: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    server_logged_errors: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [
            f"soak: {self.requests} requests in {self.wall_s:.0f} s",
            "outcomes:",
            *(f"  {count:6d}  {outcome}" for outcome, count in sorted(self.outcomes.items())),
            "by kind:",
            *(
                f"  {kind}: " + ", ".join(f"{o} {c}" for o, c in sorted(counts.items()))
                for kind, counts in sorted(self.outcomes_by_kind.items())
            ),
            f"failures (5xx, error events, connection errors, timeouts) explained by faults: "
            f"{self.failures_explained_by_faults}",
            f"unexplained failures (target 0): {len(self.unexplained_failures)}",
            *(f"  {failure}" for failure in self.unexplained_failures[:20]),
            f"bad inputs without a 4xx: {len(self.bad_inputs_without_4xx)}",
            f"unhandled errors in the server's log: {self.server_logged_errors}",
            f"engine requests unfinished at the end (target 0): "
            f"{self.unfinished_engine_requests_at_end}",
            f"event-loop lag p99 (server histogram, bucket bound): {_s(self.event_loop_lag_p99_s)}"
            f"; worst bucket {_s(self.event_loop_lag_max_bucket_s)}",
            f"/health latency from the client: p50 {_s(self.health_latency_p50_s)}, "
            f"p99 {_s(self.health_latency_p99_s)}",
            "memory (RSS of the server and its children, per server life):",
            *(f"  {life}" for life in self.memory),
            "faults:",
            *(f"  {fault}" for fault in self.faults),
        ]
        return "\n".join(lines)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def build_report(
    results: list[Result],
    faults: list[Fault],
    lives: list[Life],
    health_latencies: list[float],
    wall_s: float,
    margin_s: float,
) -> Report:
    by_kind: dict[str, Counter[str]] = {}
    for result in results:
        by_kind.setdefault(result.kind, Counter())[result.outcome] += 1
    explained = 0
    unexplained: list[dict[str, Any]] = []
    for result in results:
        if not result.failed:
            continue
        if any(fault.covers(result, margin_s) for fault in faults):
            explained += 1
        else:
            unexplained.append({"kind": result.kind, "outcome": result.outcome})
    bad = [
        {"outcome": r.outcome}
        for r in results
        if r.bad_input
        and not (r.status is not None and 400 <= r.status < 500)
        and not any(fault.covers(r, margin_s) for fault in faults)
    ]
    return Report(
        wall_s=wall_s,
        requests=len(results),
        outcomes=dict(Counter(r.outcome for r in results)),
        outcomes_by_kind={kind: dict(counts) for kind, counts in by_kind.items()},
        failures_explained_by_faults=explained,
        unexplained_failures=unexplained,
        bad_inputs_without_4xx=bad,
        unfinished_engine_requests_at_end=lives[-1].unfinished_end if lives else None,
        event_loop_lag_p99_s=lag_quantile(lives, 0.99),
        event_loop_lag_max_bucket_s=lag_quantile(lives, 1.0),
        health_latency_p50_s=quantile(health_latencies, 0.5),
        health_latency_p99_s=quantile(health_latencies, 0.99),
        memory=[
            {
                "rss_start_mib": round(life.rss_start / 2**20, 1),
                "rss_end_mib": None if life.rss_end is None else round(life.rss_end / 2**20, 1),
                "growth_mib": None
                if life.rss_end is None
                else round((life.rss_end - life.rss_start) / 2**20, 1),
            }
            for life in lives
        ],
        faults=[
            {
                "name": f.name,
                "window_s": None if f.ended is None else round(f.ended - f.started, 1),
                **f.detail,
            }
            for f in faults
        ],
    )
