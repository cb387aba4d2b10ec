"""Wake to first token of a sleeping model beside its cold start, and resident memory.

The memory is the process tree's with all models awake, one asleep and all asleep.

Two real engines in this process (the default model, and the same weights under a
second name), held by the server's pool (`engine.warm`) with the sleeper of this
platform: on a CPU the pause stand-in, which keeps the memory (so the three memory
figures match); on a GPU, vLLM's sleep mode (built with `enable_sleep_mode`).

    python -m perf warm [--wakes 20] [--out result.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from typing import Any

import psutil

from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir
from engine.protocol import GenerateRequest, SamplingOptions
from engine.warm.model import WarmConfig, WarmModel
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper, Sleeper, VLLMSleeper

SECOND_NAME = "warm-second"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def tree_rss_mib() -> float:
    me = psutil.Process()
    processes = [me, *me.children(recursive=True)]
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total / 2**20


async def first_token_s(model: WarmModel, request_id: str) -> float:
    request = GenerateRequest(
        request_id,
        SamplingOptions(max_tokens=1, temperature=0),
        messages=[{"role": "user", "content": "Say hi."}],
    )
    started = time.perf_counter()
    stream = model.generate(request)
    try:
        await anext(stream)
        return time.perf_counter() - started
    finally:
        await stream.aclose()


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_s": round(statistics.median(values), 4),
        "p99_s": round(percentile(values, 99), 4),
        "max_s": round(max(values), 4),
        "n": len(values),
    }


async def run(wakes: int, on_gpu: bool) -> dict[str, Any]:
    from engine.vllm_backend.config import EngineConfig
    from engine.vllm_backend.engine import VLLMEngine

    sleeper: Sleeper = VLLMSleeper() if on_gpu else PauseSleeper()
    pool = ModelPool(sleeper)
    wake_seconds: list[float] = []
    pool.observers.append(lambda what, _m, s: wake_seconds.append(s) if what == "wake" else None)
    cold_starts = []
    for position, name in enumerate((DEFAULT_MODEL_NAME, SECOND_NAME)):
        engine = VLLMEngine(
            EngineConfig(
                model=str(default_model_dir()),
                served_names=(name,),
                dtype="auto" if on_gpu else "float32",
                enforce_eager=not on_gpu,
                max_model_len=2048,
                enable_sleep_mode=on_gpu,
                prometheus_stats=position == 0,
            )
        )
        started = time.perf_counter()
        await engine.start()
        cold_starts.append(time.perf_counter() - started)
        pool.add(engine, WarmConfig())
    first, second = pool.models
    try:
        await first_token_s(first, "warmup")
        awake = [await first_token_s(first, f"awake-{i}") for i in range(wakes)]
        woken = []
        for i in range(wakes):
            await pool.sleep(first)
            woken.append(await first_token_s(first, f"woken-{i}"))
        memory = {"all_awake_mib": round(tree_rss_mib())}
        await pool.sleep(second)
        memory["one_asleep_mib"] = round(tree_rss_mib())
        await pool.sleep(first)
        memory["all_asleep_mib"] = round(tree_rss_mib())
        await pool.wake(first)
        await pool.wake(second)
    finally:
        await pool.shutdown()
    return {
        "sleeper": type(sleeper).__name__,
        "cold_start_s": [round(s, 2) for s in cold_starts],
        "first_token_awake": summary(awake),
        "wake_to_first_token": summary(woken),
        "wake_alone": summary(wake_seconds[:wakes]),
        "rss": memory,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wakes", type=int, default=20)
    parser.add_argument("--out", help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.config.settings import has_nvidia_gpu

    on_gpu = has_nvidia_gpu()
    if not on_gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(run(args.wakes, on_gpu))
    result["load_average_before"] = load_before
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as file:
            file.write(text + "\n")
