"""Event-loop lag: how late a timer fires on the app's loop, as a Prometheus histogram.

Anything that blocks the loop (a schema check, tokenizing a long prompt) delays every
stream and /health by the same amount; this sampler makes that visible from outside
(`lilac_event_loop_lag_seconds`), for operators and for the soak harness's p99.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Histogram

SAMPLE_INTERVAL_S = 0.1
# Fine below 100 ms (where a healthy loop lives), coarse above (where it hurts).
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopLagMonitor:
    """Sleeps `interval_s` over and over and records how much longer each sleep took."""

    def __init__(self, registry: CollectorRegistry, interval_s: float = SAMPLE_INTERVAL_S):
        self.interval_s = interval_s
        self.histogram = Histogram(
            "lilac_event_loop_lag_seconds",
            "How late a timer on the server's event loop fires (sampled every 100 ms)",
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.histogram.observe(max(0.0, loop.time() - before - self.interval_s))
