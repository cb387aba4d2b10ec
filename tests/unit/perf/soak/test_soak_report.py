"""The soak report's bookkeeping: which failures a fault explains, and the lag quantile
read from the server's cumulative histogram buckets."""

from __future__ import annotations

import math

from perf.soak.report import Fault, Life, build_report, lag_buckets, lag_quantile
from perf.soak.traffic import Result

METRICS = """\
# HELP lilac_event_loop_lag_seconds lag
# TYPE lilac_event_loop_lag_seconds histogram
lilac_event_loop_lag_seconds_bucket{le="0.001"} 90.0
lilac_event_loop_lag_seconds_bucket{le="0.01"} 99.0
lilac_event_loop_lag_seconds_bucket{le="0.1"} 100.0
lilac_event_loop_lag_seconds_bucket{le="+Inf"} 100.0
lilac_event_loop_lag_seconds_count 100.0
lilac_event_loop_lag_seconds_sum 0.5
"""


def test_lag_buckets_and_quantiles() -> None:
    end = lag_buckets(METRICS)
    assert end == {0.001: 90.0, 0.01: 99.0, 0.1: 100.0, math.inf: 100.0}
    life = Life(rss_start=0, lag_start={0.001: 0.0, 0.01: 0.0, 0.1: 0.0, math.inf: 0.0})
    life.lag_end = end
    assert lag_quantile([life], 0.5) == 0.001
    assert lag_quantile([life], 0.99) == 0.01
    assert lag_quantile([life], 1.0) == 0.1
    assert lag_quantile([Life(rss_start=0, lag_start={})], 0.99) is None  # no figures


def test_failures_inside_a_fault_window_are_explained() -> None:
    fault = Fault("sigterm", started=100.0, ended=110.0)
    results = [
        Result("chat", 90.0, 98.0, "status 503", 503),  # within the 3 s margin before
        Result("chat", 105.0, 106.0, "connection error"),
        Result("chat stream", 112.0, 114.0, "stream error event draining", 200),  # margin after
        Result("chat", 120.0, 121.0, "status 500", 500),  # unexplained
        Result("chat", 120.0, 121.0, "status 429", 429),  # an outcome, not a failure
        Result("bad input", 50.0, 51.0, "status 200", 200, bad_input=True),
    ]
    life = Life(rss_start=2**20, lag_start={}, rss_end=3 * 2**20, unfinished_end=0.0)
    report = build_report(results, [fault], [life], [0.01, 0.02], wall_s=60.0, margin_s=3.0)
    assert report.failures_explained_by_faults == 3
    assert report.unexplained_failures == [{"kind": "chat", "outcome": "status 500"}]
    assert report.bad_inputs_without_4xx == [{"outcome": "status 200"}]
    assert report.outcomes["status 429"] == 1
    assert report.memory == [{"rss_start_mib": 1.0, "rss_end_mib": 3.0, "growth_mib": 2.0}]
    assert report.unfinished_engine_requests_at_end == 0.0
    assert "unexplained failures (target 0): 1" in report.render()
