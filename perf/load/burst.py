"""Bursts against a server started with default admission flags (`make burst`).

    python -m perf burst [--burst 256] [--bench 64:128,256:256] [--output-len 16]

One client sends `--burst` concurrent chat requests to an idle server and counts them
by status (all should complete: queued, not rejected); then vLLM's own serving
benchmark (`vllm.benchmarks.serve`, random prompts, as the load benchmark drives it) runs
at each `CONCURRENCY:PROMPTS` and reports its failed requests. The server runs with
its default flags except the engine's size (the model's context 2048, a 1 GiB KV
cache on the CPU). Results: perf/out/burst/.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import time

import httpx

from perf.harness.results import output
from perf.harness.servers import Server, free_port, lilac_argv
from perf.load.benchmark import NAME

OUT = output("burst")


async def burst(base_url: str, count: int, max_tokens: int) -> dict[str, object]:
    body = {
        "model": NAME,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": max_tokens,
    }
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=base_url, timeout=900, limits=limits) as client:
        start = time.monotonic()
        responses = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for _ in range(count)),
            return_exceptions=True,
        )
        elapsed = time.monotonic() - start
    outcomes: collections.Counter[str] = collections.Counter()
    for response in responses:
        if isinstance(response, BaseException):
            outcomes[type(response).__name__] += 1
        else:
            code = (
                response.json().get("error", {}).get("code")
                if response.status_code != 200
                else None
            )
            outcomes[f"{response.status_code}{' ' + code if code else ''}"] += 1
    return {"requests": count, "outcomes": dict(outcomes), "seconds": round(elapsed, 1)}


def bench(port: int, model_dir: str, concurrency: int, prompts: int, output_len: int) -> dict:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            *("--backend", "openai-chat", "--endpoint", "/v1/chat/completions"),
            *("--dataset-name", "random", "--random-input-len", "64"),
            *("--random-output-len", str(output_len), "--port", str(port)),
            *("--model", model_dir, "--served-model-name", NAME, "--tokenizer", model_dir),
            *("--max-concurrency", str(concurrency), "--num-prompts", str(prompts)),
            *("--seed", str(2000 + concurrency), "--num-warmups", "0"),
            *("--ready-check-timeout-sec", "0", "--disable-tqdm"),
        ]
    )
    result = main(args)
    return {
        "concurrency": concurrency,
        "prompts": prompts,
        "completed": result["completed"],
        "failed": result.get("failed", prompts - result["completed"]),
        "duration_s": round(result["duration"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--burst", type=int, default=256)
    parser.add_argument("--bench", default="64:128,256:256")
    parser.add_argument("--output-len", type=int, default=16)
    args = parser.parse_args(argv)
    from engine.checkpoint import default_model_dir

    model_dir = str(default_model_dir())
    port = free_port()
    argv = lilac_argv(
        port,
        *("--model", model_dir, "--served-model-name", NAME, "--max-model-len", "2048"),
        *("--cpu-kvcache-space-gib", "1", "--log-level", "warning"),
    )
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.getcwd()}
    server = Server(argv, OUT / "server.log", port=port, env=env)
    report: dict[str, object] = {}
    try:
        server.wait_healthy(300)
        report["burst"] = asyncio.run(
            burst(f"http://127.0.0.1:{port}", args.burst, args.output_len)
        )
        print(json.dumps(report["burst"]), flush=True)
        runs = []
        for spec in args.bench.split(","):
            concurrency, prompts = (int(part) for part in spec.split(":"))
            runs.append(bench(port, model_dir, concurrency, prompts, args.output_len))
            print(json.dumps(runs[-1]), flush=True)
        report["bench"] = runs
        report["load_average"] = os.getloadavg()
    finally:
        server.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0
