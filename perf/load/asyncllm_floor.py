"""vLLM's AsyncLLM frontend alone: its CPU per output token, without any HTTP server.

    python -m perf asyncllm-floor [--concurrency 16] [--num-prompts 32] [--output-len 64] \\
        [--variants delta,final,delta-nostats,interval4] [--rounds 1] [--profile delta]

Both servers this suite compares (ours and `vllm serve`) run vLLM's AsyncLLM in their
HTTP process: its output handler reads the engine core's ZMQ socket, decodes the
outputs, detokenizes, checks stop strings, builds each `RequestOutput` and wakes the
request's `generate` loop. What that costs per token is a floor under either server's
HTTP CPU per token. This drives the AsyncLLM built exactly as our server builds it
(`engine.vllm_backend.config.build_async_llm`, the load benchmark's engine flags) with
vLLM's random prompts (pre-tokenized: no chat template, no tokenizing of the prompt),
`concurrency` streams at a time through `AsyncLLM.generate`, `ignore_eos`, and reads
this process's CPU (every thread, `time.process_time`; the engine core is another
process) over each run, and over 4 s of idle before it.

Variants, all on one engine, in turn:
- `delta`: `RequestOutputKind.DELTA`, one output per token, as both servers stream;
- `final`: `FINAL_ONLY`, one output per request (detokenizing still runs per token);
- `interval4`: DELTA with `stream_interval=4` (an output every 4 tokens);
- `delta-nostats`: DELTA with the engine's stats off in the frontend (no per-token
  `IterationStats`, no Prometheus record per step), as `vllm serve --disable-log-stats`
  runs; our server keeps vLLM's Prometheus series on.
`--profile VARIANT` runs that variant once more under `py-spy record` (on-CPU samples)
and splits the samples by layer as `python -m perf profile-server` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perf.harness.results import output
from perf.load import benchmark as load
from perf.load.profile_server import summarize

OUT = output("asyncllm-floor")
VARIANTS = ("delta", "final", "interval4", "delta-nostats")


def process_cpu() -> float:
    """CPU seconds of this process, every thread, ended ones included
    (CLOCK_PROCESS_CPUTIME_ID: nanoseconds, not the 10 ms ticks of `cpu_times`)."""
    return time.process_time()


def prompts(args: argparse.Namespace, model_dir: str, seed: int) -> list[list[int]]:
    """The load benchmark's random prompts, as token ids."""
    from vllm.benchmarks.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    bench = parser.parse_args(
        [
            *load.bench_argv(args, model_dir),
            *("--num-prompts", str(args.num_prompts), "--seed", str(seed)),
        ]
    )
    tokenizer = get_tokenizer(model_dir)
    return [tokenizer.encode(str(s.prompt)) for s in get_samples(bench, tokenizer)]


def sampling(variant: str, output_len: int) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    kind = RequestOutputKind.FINAL_ONLY if variant == "final" else RequestOutputKind.DELTA
    return SamplingParams(
        max_tokens=output_len,
        temperature=0.0,
        ignore_eos=True,
        output_kind=kind,
        stream_interval=4 if variant == "interval4" else None,
    )


async def set_stats(llm: Any, on: bool) -> None:
    """Turn the frontend's stats on or off between runs: the output handler reads
    `log_stats` once when it starts, so it is restarted (idle, nothing in flight)."""
    if llm.log_stats == on:
        return
    handler = llm.output_handler
    if handler is not None:
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
        llm.output_handler = None
    if not on:
        llm._kept_logger_manager = llm.logger_manager
    llm.logger_manager = getattr(llm, "_kept_logger_manager", None) if on else None
    llm.log_stats = on
    llm.output_processor.log_stats = on
    llm._run_output_handler()


async def one(llm: Any, ids: list[int], params: Any, rid: str) -> int:
    """One request through `AsyncLLM.generate`; its output tokens (a FINAL_ONLY output
    holds them all, a DELTA output its new ones)."""
    tokens = 0
    async for out in llm.generate({"prompt_token_ids": ids}, params, rid):
        tokens += len(out.outputs[0].token_ids)
    return tokens


async def run_variant(
    llm: Any, variant: str, batch: list[list[int]], args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    await set_stats(llm, variant != "delta-nostats")
    params = sampling(variant, args.output_len)
    await asyncio.sleep(1.0)
    cpu0, t0 = process_cpu(), time.monotonic()
    await asyncio.sleep(args.idle_s)
    idle = (process_cpu() - cpu0) / (time.monotonic() - t0)
    semaphore = asyncio.Semaphore(args.concurrency)

    async def limited(i: int, ids: list[int]) -> int:
        async with semaphore:
            return await one(llm, ids, params, f"{tag}-{variant}-{i}")

    load_before = os.getloadavg()[0]
    cpu0, t0 = process_cpu(), time.monotonic()
    tokens = sum(await asyncio.gather(*(limited(i, ids) for i, ids in enumerate(batch))))
    wall, cpu = time.monotonic() - t0, process_cpu() - cpu0
    return {
        "variant": variant,
        "tag": tag,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "tok_per_s": round(tokens / wall, 1),
        "cpu_s": round(cpu, 3),
        "idle_ms_per_s": round(1000 * idle, 2),
        "cpu_s_per_1k_tokens": round(1000 * cpu / tokens, 4),
        "net_cpu_s_per_1k_tokens": round(1000 * (cpu - idle * wall) / tokens, 4),
        "load_avg_1m_before": load_before,
        "load_avg_1m": os.getloadavg()[0],
    }


def spy(rate: int, raw: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [binary, "record", "-p", str(os.getpid()), "-r", str(rate), "--nonblocking"]
    return subprocess.Popen(
        [*argv, "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )


async def run(args: argparse.Namespace, model_dir: str) -> list[dict[str, Any]]:
    from engine.vllm_backend.config import EngineConfig, build_async_llm

    llm = build_async_llm(
        EngineConfig(
            model=model_dir,
            served_names=(load.NAME,),
            dtype="float32",
            max_model_len=args.max_model_len,
            enforce_eager=True,
            gpu_memory_utilization=args.gpu_memory_utilization,
            seed=0,
            grammar_warmup=False,
        )
    )
    rows: list[dict[str, Any]] = []
    try:
        warm = prompts(argparse.Namespace(**{**vars(args), "num_prompts": 2}), model_dir, 999)
        for i, ids in enumerate(warm):
            await one(llm, ids, sampling("delta", 8), f"warm-{i}")
        for round_ in range(args.rounds):
            for n, variant in enumerate(args.variants):
                # Fresh prompts each run: a prompt seen before would hit the prefix cache.
                batch = prompts(args, model_dir, 2000 + 100 * round_ + n)
                row = await run_variant(llm, variant, batch, args, f"r{round_}")
                print(json.dumps(row), flush=True)
                rows.append(row)
        if args.profile:
            raw = OUT / f"{args.profile}.raw.txt"
            batch = prompts(args, model_dir, 3000)  # before the recorder: not profiled
            recorder = spy(args.rate, raw)
            row = await run_variant(llm, args.profile, batch, args, "profiled")
            recorder.send_signal(signal.SIGINT)
            await asyncio.to_thread(recorder.wait, 60)
            row["profile"] = summarize(raw)
            print(json.dumps(row), flush=True)
            print(row["profile"], flush=True)
            rows.append(row)
    finally:
        llm.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    from engine.checkpoint import default_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--variants",
        type=lambda text: [v for v in text.split(",") if v],
        default=list(VARIANTS),
        help=f"comma-separated, in order: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=4.0)
    parser.add_argument("--profile", choices=VARIANTS, default=None)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--model-dir", default=None, help="default: the prepared SmolLM2")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-gib", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    args = parser.parse_args(argv)
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    OUT.mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(run(args, args.model_dir or str(default_model_dir())))
    (OUT / "rows.json").write_text(json.dumps(rows, indent=1))
    return 0
