"""Event-loop lag: how late a timer fires on the app's loop, as a Prometheus histogram.

Anything that blocks the loop (a schema check, tokenizing a long prompt) delays every
stream and /health by the same amount; this sampler makes that visible from outside
(`lilac_event_loop_lag_seconds`), for operators and for the soak harness's p99.

It samples every 100 ms while an HTTP request is in flight, where a stall delays
someone, and every second while none is: each sample is a wake-up of the process
(0.12-0.17 ms of CPU on a small VM), and ten a second were most of what an idle
server spent. The first request to arrive while it sleeps the long interval wakes it,
and it samples every 100 ms from that moment. Its timers fall on the loop clock's
grid (engine.ticks), shared with the server's other periodic work.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Histogram

from engine.ticks import tick_delay

SAMPLE_INTERVAL_S = 0.1
IDLE_SAMPLE_INTERVAL_S = 1.0
# Fine below 100 ms (where a healthy loop lives), coarse above (where it hurts).
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopLagMonitor:
    """Sleeps to the next tick over and over and records how much later than the tick
    each sleep ended. `started` and `ended` count the HTTP requests in flight
    (app.observability.middleware calls them)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        interval_s: float = SAMPLE_INTERVAL_S,
        idle_interval_s: float = IDLE_SAMPLE_INTERVAL_S,
    ) -> None:
        self.interval_s = interval_s
        self.idle_interval_s = idle_interval_s
        self.in_flight = 0
        # Set while the sampler sleeps the idle interval: a request arriving ends it.
        self._idle_sleep: asyncio.Future[bool] | None = None
        self.histogram = Histogram(
            "lilac_event_loop_lag_seconds",
            "How late a timer on the server's event loop fires (sampled every 100 ms "
            "while requests are in flight, every second otherwise)",
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )

    def started(self) -> None:
        self.in_flight += 1
        idle_sleep = self._idle_sleep
        if idle_sleep is not None:
            self._idle_sleep = None
            if not idle_sleep.done():
                idle_sleep.set_result(True)

    def ended(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            busy = self.in_flight > 0
            delay = tick_delay(self.interval_s if busy else self.idle_interval_s)
            deadline = loop.time() + delay
            if busy:
                await asyncio.sleep(delay)
            elif await self._sleep_idle(loop, delay):
                continue  # a request came: not a late timer; sample finely from now
            self.histogram.observe(max(0.0, loop.time() - deadline))

    async def _sleep_idle(self, loop: asyncio.AbstractEventLoop, delay: float) -> bool:
        """Sleep `delay`; True when a request arriving ended the sleep early."""
        idle_sleep: asyncio.Future[bool] = loop.create_future()
        self._idle_sleep = idle_sleep
        timer = loop.call_later(delay, _resolve, idle_sleep)
        try:
            return await idle_sleep
        finally:
            timer.cancel()
            if self._idle_sleep is idle_sleep:
                self._idle_sleep = None


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
