"""The loop-lag sampler records how long a blocked loop made its timer late: finely
while requests are in flight, coarsely while none is, and a request arriving wakes it
from the coarse sleep."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest

from app.observability.loop_lag import LoopLagMonitor

COUNT = "lilac_event_loop_lag_seconds_count"


def _late_samples(registry: CollectorRegistry) -> float:
    """Samples over 250 ms late."""
    total = registry.get_sample_value(COUNT) or 0.0
    within = registry.get_sample_value("lilac_event_loop_lag_seconds_bucket", {"le": "0.25"})
    return total - (within or 0.0)


async def test_a_blocked_loop_shows_as_lag() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval_s=0.01)
    monitor.started()  # a request in flight
    sampler = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # block the loop, as a synchronous schema check would
    await asyncio.sleep(0.05)
    sampler.cancel()
    total = registry.get_sample_value(COUNT)
    assert total is not None and total >= 3
    assert _late_samples(registry) == 1  # one sample > 250 ms
    assert b"lilac_event_loop_lag_seconds_bucket" in generate_latest(registry)


async def test_with_nothing_in_flight_it_samples_at_the_idle_interval() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval_s=0.01, idle_interval_s=60.0)
    sampler = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.2)  # twenty fine intervals
    assert (registry.get_sample_value(COUNT) or 0.0) == 0  # the first idle tick is far
    monitor.started()
    await asyncio.sleep(0.2)
    monitor.ended()
    sampler.cancel()
    assert (registry.get_sample_value(COUNT) or 0.0) >= 3


async def test_a_request_arriving_wakes_the_idle_sampler() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval_s=0.01, idle_interval_s=60.0)
    sampler = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.02)  # asleep for the idle interval
    monitor.started()
    await asyncio.sleep(0.02)  # the sampler is on the fine interval now
    time.sleep(0.3)  # the request blocks the loop
    await asyncio.sleep(0.05)
    sampler.cancel()
    assert _late_samples(registry) == 1
    monitor.ended()
    assert monitor.in_flight == 0


def _lag_count(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(COUNT + " "):
            return float(line.split()[1])
    return 0.0


async def test_the_app_samples_finely_while_a_request_streams() -> None:
    from app.config.settings import Settings
    from app.main import create_app
    from engine.scripted import ScriptedEngine
    from tests.client import AppClient, scratch_data_dir

    app = create_app(
        Settings(data_dir=scratch_data_dir()), engine=ScriptedEngine(token_delay_s=0.05)
    )
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "ignore_eos": True,
        "stream": True,
    }
    async with app.lifespan(), AppClient(app, timeout=5.0) as http:
        await asyncio.sleep(0.05)  # the sampler asleep for its idle second
        before = _lag_count((await http.get("/metrics")).text)
        response = await http.post("/v1/chat/completions", json=body)  # 0.8 s of tokens
        assert response.status_code == 200
        during = _lag_count((await http.get("/metrics")).text) - before
        await asyncio.sleep(0.5)  # nothing in flight now
        after = _lag_count((await http.get("/metrics")).text) - before - during
    assert during >= 3  # ten a second while the stream ran, not one
    assert after <= 2  # a second apart (a /metrics request is in flight briefly)
