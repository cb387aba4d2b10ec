"""Two models under alternating load: one server holding both against two servers.

The one server holds both (`[[models]]`); the two single-model servers share the box.

Clients send chat requests that name one model, then the other, in turn; each run
reports output tokens per second and TTFT (p50, p99) per setup, side by side. Both
models are the default SmolLM2 weights under two names, so the engines do the same
work and only the serving setup differs. With `--budget-gib` (default 1.5, and 1 GiB
counted per model) the two-model server holds one model awake at a time and wakes the
other on demand; `--budget-gib 0` keeps both awake.

    HF_HUB_OFFLINE=1 python -m perf warm-alternating [--requests 32] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from perf.harness.results import output
from perf.harness.servers import Server, free_port, lilac_argv

OUT = output("warm-alternating")
NAMES = ("model-a", "model-b")
ENGINE_FLAGS = ("--max-model-len", "2048", "--cpu-kvcache-space-gib", "1")


def two_model_config(model_dir: str, path: Path) -> Path:
    tables = [
        f'[[models]]\nmodel = "{model_dir}"\nserved_model_name = "{name}"\n'
        "memory_gib = 1\nkeep_alive = -1\n"
        for name in NAMES
    ]
    path.write_text("\n".join(tables))
    return path


async def one_request(http: httpx.AsyncClient, url: str, model: str, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if ttft is None and chunk.get("choices"):
                ttft = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"ttft_s": ttft or 0.0, "tokens": tokens}


async def alternate(urls: dict[str, str], requests: int, concurrency: int, max_tokens: int) -> dict:
    """`requests` requests naming the models in turn, `concurrency` at a time."""
    order = [NAMES[i % 2] for i in range(requests)]
    results: list[dict] = []
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=600) as http:

        async def send(model: str) -> None:
            async with slots:
                results.append(await one_request(http, urls[model], model, max_tokens))

        started = time.perf_counter()
        await asyncio.gather(*(send(model) for model in order))
        wall = time.perf_counter() - started
    ttfts = sorted(r["ttft_s"] for r in results)
    return {
        "requests": len(results),
        "output_tok_s": round(sum(r["tokens"] for r in results) / wall, 2),
        "ttft_p50_s": round(statistics.median(ttfts), 3),
        "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, round(0.99 * (len(ttfts) - 1)))], 3),
        "wall_s": round(wall, 1),
    }


def serve(argv: list[str], name: str, port: int) -> Server:
    command = lilac_argv(port, *argv, *ENGINE_FLAGS)
    return Server(command, OUT / f"{name}.log", port=port, env={"VLLM_CPU_KVCACHE_SPACE": "1"})


def run_setup(
    name: str, servers: list[tuple[Server, int]], urls: dict[str, str], args: Any
) -> dict:
    try:
        for server, _ in servers:
            server.wait_healthy(900)
        asyncio.run(alternate(urls, 4, 2, 2))  # warm-up: both models answer once
        result = asyncio.run(alternate(urls, args.requests, args.concurrency, args.max_tokens))
        return {"setup": name, **result}
    finally:
        for server, _ in servers:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--budget-gib", type=float, default=1.5)
    args = parser.parse_args(argv)
    from engine.checkpoint import default_model_dir

    model_dir = str(default_model_dir())
    OUT.mkdir(parents=True, exist_ok=True)
    config = two_model_config(model_dir, OUT / "two-models.toml")
    budget = ["--memory-budget-gib", str(args.budget_gib)] if args.budget_gib > 0 else []
    port = free_port()
    one = serve(["--config", str(config), *budget], "one-server", port)
    url = f"http://127.0.0.1:{port}"
    rows = [run_setup("one server, two models", [(one, port)], dict.fromkeys(NAMES, url), args)]
    ports = [free_port(), free_port()]
    two = [
        serve(["--model", model_dir, "--served-model-name", name], name, p)
        for name, p in zip(NAMES, ports, strict=True)
    ]
    urls = {name: f"http://127.0.0.1:{p}" for name, p in zip(NAMES, ports, strict=True)}
    rows.append(run_setup("two servers", list(zip(two, ports, strict=True)), urls, args))
    for row in rows:
        print(json.dumps(row))
    (OUT / "result.json").write_text(json.dumps({"settings": vars(args), "rows": rows}, indent=2))
    return 0
