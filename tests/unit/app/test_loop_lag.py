"""The loop-lag sampler records how long a blocked loop made its timer late."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest

from app.loop_lag import LoopLagMonitor


async def test_a_blocked_loop_shows_as_lag() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval_s=0.01)
    sampler = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # block the loop, as a synchronous schema check would
    await asyncio.sleep(0.05)
    sampler.cancel()
    over_quarter_second = registry.get_sample_value(
        "lilac_event_loop_lag_seconds_bucket", {"le": "0.25"}
    )
    total = registry.get_sample_value("lilac_event_loop_lag_seconds_count")
    assert total is not None and total >= 3
    assert over_quarter_second is not None and over_quarter_second < total  # one sample > 250 ms
    assert b"lilac_event_loop_lag_seconds_bucket" in generate_latest(registry)
