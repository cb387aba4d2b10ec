"""Series of the batch runner, read from it at scrape time: lines queued (pending in the
batches this replica looks after, at its last look) and running here, lines answered
and cut (to run again later), and the tokens batch lines were billed."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.deferred.runner import DeferredRunner


class BatchCollector(Collector):
    def __init__(self, runner: DeferredRunner) -> None:
        self._runner = runner

    def collect(self) -> Iterator[Metric]:
        runner, stats = self._runner, self._runner.stats
        lines = GaugeMetricFamily(
            "lilac_batch_lines",
            "Batch lines queued (all replicas) and running here",
            labels=["state"],
        )
        lines.add_metric(["queued"], float(stats.queued))
        lines.add_metric(["running"], float(len(runner.running)))
        yield lines
        yield CounterMetricFamily(
            "lilac_batch_lines_completed",
            "Batch lines this replica answered (a success or the endpoint's error)",
            value=float(stats.answered),
        )
        yield CounterMetricFamily(
            "lilac_batch_lines_cut",
            "Batch lines cut before their answer (capacity taken back): run again later",
            value=float(stats.cut),
        )
        tokens = CounterMetricFamily(
            "lilac_batch_tokens", "Tokens of the batch lines answered here", labels=["kind"]
        )
        tokens.add_metric(["prompt"], float(stats.prompt_tokens))
        tokens.add_metric(["completion"], float(stats.completion_tokens))
        yield tokens
