"""Batch throughput against the offline engine, and interactive TTFT beside a batch.

    python -m perf batch --phase offline   # the ceiling: the engine in process
    python -m perf batch --phase server    # the same lines as a batch, then TTFT

`offline` runs the batch's requests on our engine adapter in this process (no HTTP, no
database), at the batch concurrency: output tokens per second, the ceiling. `server`
starts `lilac-serve` (same engine flags), and measures, in order: interactive TTFT
(streamed chat at `--interactive-concurrency`, no batch); a batch of `--lines` lines
alone, from creation to `completed` (output tokens per second over that time); then the
same interactive load while a second batch runs (TTFT p50/p99 beside a batch). Lines
and interactive requests use `ignore_eos`, so each generates exactly `--max-tokens`.
Results are JSON lines on stdout and in `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KV_GIB = "1"
MAX_MODEL_LEN = 2048


@dataclass
class Sample:
    prompt: str
    expected_output_len: int


def prompts(count: int, tag: str) -> list[str]:
    return [f"{tag} {i}: name one thing about the number {i}." for i in range(count)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def offline(args: argparse.Namespace) -> dict[str, Any]:
    from engine.checkpoint import resolve_model
    from engine.vllm_backend.engine import EngineConfig, VLLMEngine
    from perf.load.offline import _run

    os.environ.update({"VLLM_CPU_KVCACHE_SPACE": KV_GIB, "HF_HUB_OFFLINE": "1"})
    model_dir, name = resolve_model(None)
    engine = VLLMEngine(
        EngineConfig(model=model_dir, served_names=(name,), dtype="float32",
                     max_model_len=MAX_MODEL_LEN, enforce_eager=True, seed=0)
    )  # fmt: skip
    await engine.start()
    try:
        await _run(engine, [Sample("warm up", 4)], 1, 0.0)
        samples = [Sample(p, args.max_tokens) for p in prompts(args.lines, "offline")]
        result = await _run(engine, samples, args.concurrency, 0.0)
    finally:
        await engine.shutdown()
    return {"kind": "offline", "lines": args.lines, "concurrency": args.concurrency,
            "output_tokens": result["total_output_tokens"], "duration_s": result["duration"],
            "output_tok_s": result["output_throughput"]}  # fmt: skip


def interactive(base_url: str, model: str, count: int, concurrency: int, max_tokens: int,
                tag: str) -> list[float]:  # fmt: skip
    """TTFT (s) of `count` streamed chats, `concurrency` at a time."""
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    ttfts: list[float] = []
    lock = threading.Lock()
    queue = list(range(count))

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop()
            start = time.perf_counter()
            stream = client.chat.completions.create(
                model=model, max_tokens=max_tokens, stream=True,
                messages=[{"role": "user", "content": f"{tag} {i}: say something."}],
                extra_body={"ignore_eos": True},
            )  # fmt: skip
            first = None
            for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - start
            with lock:
                ttfts.append(first if first is not None else time.perf_counter() - start)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ttfts


def submit(client: Any, model: str, count: int, max_tokens: int, tag: str) -> Any:
    lines = [
        json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": model, "max_tokens": max_tokens, "ignore_eos": True,
                             "messages": [{"role": "user", "content": p}]}})
        for i, p in enumerate(prompts(count, tag))
    ]  # fmt: skip
    data = io.BytesIO(("\n".join(lines) + "\n").encode())
    file = client.files.create(file=("bench.jsonl", data), purpose="batch")
    return client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def wait_done(client: Any, batch_id: str) -> Any:
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(0.2)


def output_tokens(client: Any, batch: Any) -> int:
    text = client.files.content(batch.output_file_id).text
    return sum(json.loads(line)["response"]["body"]["usage"]["completion_tokens"]
               for line in text.splitlines() if line.strip())  # fmt: skip


def ttft_row(kind: str, ttfts: list[float]) -> dict[str, Any]:
    return {"kind": kind, "requests": len(ttfts),
            "ttft_p50_ms": statistics.median(ttfts) * 1000,
            "ttft_p99_ms": percentile(ttfts, 99) * 1000}  # fmt: skip


def server(args: argparse.Namespace) -> list[dict[str, Any]]:
    import openai

    from engine.checkpoint import DEFAULT_MODEL_NAME
    from perf.harness.servers import start_lilac

    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    running = start_lilac(
        workdir,
        extra_args=("--data-dir", str(workdir / "data"), "--log-level", "warning",
                    "--batch-concurrency", str(args.concurrency)),
    )  # fmt: skip
    try:
        client = openai.OpenAI(base_url=f"{running.base_url}/v1", api_key="unused")
        model = DEFAULT_MODEL_NAME
        interactive(running.base_url, model, 4, 1, 4, "warm")
        rows.append(ttft_row("interactive_alone", interactive(
            running.base_url, model, args.interactive, args.interactive_concurrency,
            args.max_tokens, "alone")))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        if args.beside_only:
            return beside_batch(args, client, model, running.base_url, rows)
        started = time.perf_counter()
        batch = wait_done(client, submit(client, model, args.lines, args.max_tokens, "batch").id)
        duration = time.perf_counter() - started
        tokens = output_tokens(client, batch)
        rows.append({"kind": "batch_alone", "lines": args.lines, "status": batch.status,
                     "completed": batch.request_counts.completed, "output_tokens": tokens,
                     "duration_s": duration, "output_tok_s": tokens / duration})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        return beside_batch(args, client, model, running.base_url, rows)
    finally:
        running.kill_all()


def beside_batch(
    args: argparse.Namespace, client: Any, model: str, base_url: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The interactive load again, while a batch runs."""
    beside = submit(client, model, args.lines, args.max_tokens, "beside")
    time.sleep(2.0)  # the batch is running
    ttfts = interactive(base_url, model, args.interactive,
                        args.interactive_concurrency, args.max_tokens, "beside")  # fmt: skip
    batch = client.batches.retrieve(beside.id)
    rows.append({**ttft_row("interactive_beside_batch", ttfts),
                 "batch_still_running": batch.status == "in_progress",
                 "batch_lines_done_meanwhile": batch.request_counts.completed})  # fmt: skip
    print(json.dumps(rows[-1]), flush=True)
    client.batches.cancel(beside.id)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("offline", "server"), required=True)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--interactive", type=int, default=32)
    parser.add_argument("--interactive-concurrency", type=int, default=4)
    parser.add_argument("--beside-only", action="store_true", help="skip the batch alone")
    parser.add_argument("--out", type=Path, default=Path("perf/out/batch"))
    args = parser.parse_args(argv)
    if args.phase == "offline":
        rows = [asyncio.run(offline(args))]
        print(json.dumps(rows[0]), flush=True)
    else:
        rows = server(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.phase}.json").write_text(json.dumps(rows, indent=1))
    return 0
