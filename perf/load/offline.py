"""The offline ceiling of the load benchmark: the same engine and prompts, no HTTP.

The engine is our VLLMEngine adapter over vLLM's AsyncLLM with the same flags, driven
with the same random prompts at the same concurrency.

Run by the load benchmark (perf/load/benchmark.py) in its own process:
    python -m perf offline --spec perf/out/load/offline_spec.json --out perf/out/load/offline.json
The spec holds the engine settings and the benchmark arguments; metrics follow
vllm.benchmarks.serve (TTFT from the first output with text, TPOT = (latency - TTFT) /
(output tokens - 1), throughput over the wall time of the whole run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil


def _samples(bench: dict[str, Any], num_prompts: int, seed: int) -> list[Any]:
    """The prompts vllm.benchmarks.serve builds from the same arguments and seed."""
    from vllm.benchmarks.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [*bench["argv"], "--num-prompts", str(num_prompts), "--seed", str(seed)]
    )
    return get_samples(args, get_tokenizer(bench["model_dir"]))


async def _one(engine: Any, prompt: str, output_len: int, temperature: float, rid: str) -> dict:
    from engine.protocol import GenerateRequest, SamplingOptions

    request = GenerateRequest(
        request_id=rid,
        sampling=SamplingOptions(max_tokens=output_len, temperature=temperature, ignore_eos=True),
        messages=[{"role": "user", "content": prompt}],
    )
    start = time.perf_counter()
    ttft, last, tokens = None, start, 0
    async for output in engine.generate(request):
        now = time.perf_counter()
        for delta in output.choices:
            tokens += delta.token_count
            if delta.text:
                if ttft is None:
                    ttft = now - start
                last = now
    return {"ttft": ttft, "latency": last - start, "output_tokens": tokens}


async def _run(engine: Any, samples: list[Any], concurrency: int, temperature: float) -> dict:
    semaphore = asyncio.Semaphore(concurrency)

    async def limited(i: int, sample: Any) -> dict:
        async with semaphore:
            return await _one(
                engine, sample.prompt, sample.expected_output_len, temperature, f"r{i}"
            )

    me = psutil.Process()  # this process: the AsyncLLM frontend without HTTP
    cpu0, start = me.cpu_times(), time.perf_counter()
    results = await asyncio.gather(*(limited(i, s) for i, s in enumerate(samples)))
    duration = time.perf_counter() - start
    cpu1 = me.cpu_times()
    ttfts = [r["ttft"] for r in results if r["ttft"] is not None]
    tpots = [
        (r["latency"] - r["ttft"]) / (r["output_tokens"] - 1)
        for r in results
        if r["ttft"] is not None and r["output_tokens"] > 1
    ]
    output_tokens = sum(r["output_tokens"] for r in results)
    return {
        "duration": duration,
        "completed": len(ttfts),
        "total_output_tokens": output_tokens,
        "output_throughput": output_tokens / duration,
        "request_throughput": len(ttfts) / duration,
        "median_ttft_ms": float(np.median(ttfts)) * 1000,
        "p99_ttft_ms": float(np.percentile(ttfts, 99)) * 1000,
        "median_tpot_ms": float(np.median(tpots)) * 1000 if tpots else 0.0,
        "http_cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
    }


async def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from engine.vllm_backend.engine import EngineConfig, VLLMEngine

    bench = spec["bench"]
    engine = VLLMEngine(EngineConfig(**spec["engine"]))
    await engine.start()
    rows = []
    try:
        warm = _samples(bench, 1, spec["warm_up_seed"])
        await _run(engine, warm, 1, spec["temperature"])  # warm-up, not measured
        for concurrency, num_prompts, seed in spec["runs"]:
            samples = _samples(bench, num_prompts, seed)
            result = await _run(engine, samples, concurrency, spec["temperature"])
            result.update(concurrency=concurrency, num_prompts=num_prompts)
            result["load_avg_1m"] = os.getloadavg()[0]
            print(json.dumps(result), flush=True)
            rows.append(result)
    finally:
        await engine.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    os.environ.update(spec.get("env", {}))
    rows = asyncio.run(run(spec))
    args.out.write_text(json.dumps(rows, indent=1))
    return 0
