"""Generations cancelled at any moment leave nothing running in the real engine: before
vLLM registers them, while it hands them to the engine core, and while they run."""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import aclosing

from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import VLLMEngine


async def _run(engine: VLLMEngine, i: int) -> None:
    request = GenerateRequest(
        request_id=f"cancelled-{i}",
        sampling=SamplingOptions(max_tokens=256, ignore_eos=True),
        prompt=f"Story number {i}: once upon a time",
    )
    async with aclosing(engine.generate(request)) as outputs:
        async for _ in outputs:
            pass


async def test_cancelled_at_random_moments_nothing_is_left_running(
    real_engine: VLLMEngine,
) -> None:
    rng = random.Random(11)
    for round_ in range(3):
        tasks = [asyncio.create_task(_run(real_engine, 100 * round_ + i)) for i in range(64)]
        for task in tasks:
            await asyncio.sleep(rng.uniform(0, 0.004))
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    deadline = time.monotonic() + 10
    while real_engine.unfinished_requests() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert real_engine.unfinished_requests() == 0
