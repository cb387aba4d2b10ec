"""Two models in one server under a burst for one of them: the other model's TTFT.

One server holds two models (`[[models]]`: the default SmolLM2 weights under the names
`model-a` and `model-b`, two engines). Model B's TTFT is measured alone (sequential
requests), then while a burst of concurrent requests for model A runs (each from its
own client, `ignore_eos`, so the burst lasts): B's requests are sent `--probe-every-s`
apart while the burst runs, each from its own client. The same run does this for two
code trees, one server after the other: `--before-ref` (default `main`, exported from
git into a scratch folder) and this checkout; only the code on `PYTHONPATH` differs,
so the rows compare admission before and after, side by side. The load average is
recorded beside each phase (the machine is shared).

    HF_HUB_OFFLINE=1 python -m perf two-model-burst [--burst 64] [--before-ref main]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from perf.harness.results import output
from perf.harness.servers import ROOT, Server, free_port, lilac_argv
from perf.scenarios.warm_alternating import NAMES, two_model_config

OUT = output("two-model-burst")
ENGINE_FLAGS = ("--max-model-len", "1024", "--cpu-kvcache-space-gib", "1")
MODEL_A, MODEL_B = NAMES


async def ttft(http: httpx.AsyncClient, url: str, model: str, user: str, **fields: Any) -> float:
    """Seconds from sending a streamed chat request to its first chunk with choices."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Say something about {user}."}],
        "temperature": 0,
        "stream": True,
        "user": user,
        **fields,
    }
    started = time.perf_counter()
    first: float | None = None
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if first is None and chunk.get("choices"):
                first = time.perf_counter() - started
    return first if first is not None else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "max_s": round(ordered[-1], 3),
        "n": len(ordered),
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=900) as http:
        for model in NAMES:  # warm-up: both engines answer once
            await ttft(http, url, model, "warmup", max_tokens=2)
        load_alone = os.getloadavg()[0]
        alone = [
            await ttft(http, url, MODEL_B, f"b-alone-{i}", max_tokens=args.probe_tokens)
            for i in range(args.probes)
        ]
        burst_started = time.perf_counter()
        burst = [
            asyncio.create_task(
                ttft(http, url, MODEL_A, f"a-{i}", max_tokens=args.burst_tokens, ignore_eos=True)
            )
            for i in range(args.burst)
        ]
        await asyncio.sleep(args.settle_s)  # the burst is admitted and prefilling
        load_burst = os.getloadavg()[0]
        probes: list[asyncio.Task[float]] = []
        for i in range(args.probes):  # sent while the burst runs, `--probe-every-s` apart
            if all(task.done() for task in burst):
                break
            probes.append(
                asyncio.create_task(
                    ttft(http, url, MODEL_B, f"b-burst-{i}", max_tokens=args.probe_tokens)
                )
            )
            await asyncio.sleep(args.probe_every_s)
        during = list(await asyncio.gather(*probes))
        burst_ttfts = await asyncio.gather(*burst)
        burst_s = time.perf_counter() - burst_started
    return {
        "b_alone_ttft": summary(alone),
        "b_during_burst_ttft": summary(during) if during else None,
        "a_burst_ttft": summary(burst_ttfts),
        "burst_wall_s": round(burst_s, 1),
        "load_avg_1m_alone": round(load_alone, 1),
        "load_avg_1m_burst": round(load_burst, 1),
    }


def run_server(name: str, code: Path, config: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    command = lilac_argv(port, "--config", str(config), *ENGINE_FLAGS)
    log = OUT / f"{name.split()[0]}.log"  # before.log, after.log
    server = Server(command, log, port=port, env=env, cwd=code)
    try:
        server.wait_healthy(900)
        return {"code": name, **asyncio.run(measure(server.base_url, args))}
    finally:
        server.stop()


def export(ref: str, into: Path) -> Path:
    """The tree of `ref` of this repository, as files (no checkout touched)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=64, help="concurrent requests for A")
    parser.add_argument("--burst-tokens", type=int, default=64)
    parser.add_argument("--probes", type=int, default=6, help="B requests, alone and during")
    parser.add_argument("--probe-tokens", type=int, default=4)
    parser.add_argument("--settle-s", type=float, default=2.0)
    parser.add_argument("--probe-every-s", type=float, default=1.0)
    parser.add_argument("--before-ref", default="main", help="git ref of the code before")
    parser.add_argument("--skip-before", action="store_true")
    args = parser.parse_args(argv)
    from engine.checkpoint import default_model_dir

    OUT.mkdir(parents=True, exist_ok=True)
    config = two_model_config(str(default_model_dir()), OUT / "two-models.toml")
    rows = []
    with tempfile.TemporaryDirectory(prefix="two-model-burst-") as scratch:
        if not args.skip_before:
            before = export(args.before_ref, Path(scratch))
            rows.append(run_server(f"before ({args.before_ref})", before, config, args))
        rows.append(run_server("after (this checkout)", ROOT, config, args))
    for row in rows:
        print(json.dumps(row))
    (OUT / "result.json").write_text(json.dumps({"settings": vars(args), "rows": rows}, indent=2))
    return 0
