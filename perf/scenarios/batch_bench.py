"""Batch throughput against the offline engine, and interactive TTFT beside a batch.

    python -m perf batch --phase offline   # the ceiling: the engine in process
    python -m perf batch --phase server    # the same lines as a batch, then TTFT
    python -m perf batch --phase all       # both, and the batch's share of the ceiling

`offline` runs the batch's requests on our engine adapter in this process (no HTTP, no
database), at the batch concurrency: output tokens per second, the ceiling. `server`
starts `lilac-serve` (same engine flags) and measures a batch of `--lines` lines alone,
from creation to `completed` (output tokens per second over that time, beside the load
average); then `--runs` runs, each of `--rounds` rounds of an interactive load driven by
vLLM's serving benchmark (`vllm bench serve`: random prompts of `--input-len` tokens,
streamed chat, at `--interactive-concurrency`), each round once without a batch and once
beside one (submitted, and measured once it runs every line it may), in alternating
order: per run, TTFT p50/p99 of each condition over its rounds, their ratio, the load
average, and how many batch lines were cut and answered meanwhile. Lines and
interactive requests use `ignore_eos`, so each generates exactly `--max-tokens`.
`--ceiling` names an earlier offline phase's JSON, for the ratio when the phases run
apart. Results are JSON lines on stdout and in `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

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


def interactive(base_url: str, count: int, concurrency: int, max_tokens: int, seed: int,
                input_len: int) -> list[float]:  # fmt: skip
    """TTFT (s) of `count` requests of vLLM's serving benchmark (`vllm bench serve`, as
    the load benchmark runs it: random prompts of `input_len` tokens, streamed chat,
    `ignore_eos`) at `concurrency`, each run on its own prompt seed."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from engine.checkpoint import resolve_model
    from perf.load.benchmark import bench_argv

    model_dir, _ = resolve_model(None)
    shape = argparse.Namespace(input_len=input_len, output_len=max_tokens, temperature=0.0)
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    port = base_url.rsplit(":", 1)[1]
    bench = parser.parse_args([
        *bench_argv(shape, model_dir),
        *("--port", port, "--max-concurrency", str(concurrency)),
        *("--num-prompts", str(count), "--seed", str(seed), "--save-detailed"),
    ])  # fmt: skip
    result = main(bench)
    if result["completed"] != count:
        raise RuntimeError(f"{count - result['completed']} interactive requests failed")
    return [float(t) for t in result["ttfts"]]


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


ADMIN_KEY = "batch-bench-admin"


def running_lines(base_url: str) -> float:
    for line in httpx.get(f"{base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith('lilac_batch_lines{state="running"}'):
            return float(line.split()[-1])
    return 0.0


def runner_stats(base_url: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    answer = httpx.get(f"{base_url}/admin/batches?limit=1", headers=headers, timeout=10)
    return dict(answer.json()["runner"])


def until(check: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not get there in time")
        time.sleep(0.1)


def server(args: argparse.Namespace) -> list[dict[str, Any]]:
    import openai

    from engine.checkpoint import DEFAULT_MODEL_NAME
    from perf.harness.servers import start_lilac

    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    running = start_lilac(
        workdir,
        extra_args=("--data-dir", str(workdir / "data"), "--log-level", "warning",
                    "--batch-concurrency", str(args.concurrency),
                    "--batch-concurrency-beside-interactive", str(args.beside),
                    "--batch-resume-after-s", str(args.resume_after),
                    "--batch-prefill-lines", str(args.prefill_lines)),
        extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
    )  # fmt: skip
    try:
        client = openai.OpenAI(base_url=f"{running.base_url}/v1", api_key="unused")
        model = DEFAULT_MODEL_NAME
        interactive(running.base_url, 4, 1, 4, 999, args.input_len)  # warm-up
        if not args.beside_only:
            rows.append(batch_alone(args, client, model))
            print(json.dumps(rows[-1]), flush=True)
        for run in range(args.first_run, args.first_run + args.runs):
            rows += side_by_side(args, client, model, running.base_url, run)
        return rows
    finally:
        running.kill_all()


def batch_alone(args: argparse.Namespace, client: Any, model: str) -> dict[str, Any]:
    """A batch with no interactive traffic: output tokens per second from creation to
    `completed` (validation and finalizing included)."""
    started = time.perf_counter()
    load = os.getloadavg()[0]
    batch = wait_done(client, submit(client, model, args.lines, args.max_tokens, "batch").id)
    duration = time.perf_counter() - started
    tokens = output_tokens(client, batch)
    return {"kind": "batch_alone", "lines": args.lines, "status": batch.status,
            "completed": batch.request_counts.completed, "output_tokens": tokens,
            "duration_s": duration, "output_tok_s": tokens / duration,
            "load_avg_1m": [load, os.getloadavg()[0]]}  # fmt: skip


def side_by_side(
    args: argparse.Namespace, client: Any, model: str, base_url: str, run: int
) -> list[dict[str, Any]]:
    """`--rounds` rounds, each measuring the interactive load without a batch and beside
    one (the order alternating from round to round, so a machine getting busier or
    quieter weighs on both alike): TTFT p50/p99 of each over all rounds."""
    ttfts: dict[str, list[float]] = {"alone": [], "beside": []}
    loads: dict[str, list[float]] = {"alone": [], "beside": []}
    done_meanwhile = 0
    cut_before = runner_stats(base_url)["cut"]
    seed = 2000 + 100 * run  # each round its own prompts: none hits the prefix cache
    for round_ in range(args.rounds):
        order = ("alone", "beside") if round_ % 2 == 0 else ("beside", "alone")
        for condition in order:
            until(lambda: running_lines(base_url) == 0)  # no batch line left from before
            batch = None
            if condition == "beside":
                batch = submit(client, model, args.lines, args.max_tokens, f"beside{seed}")
                # The batch in full swing: every line it may run is running.
                until(lambda: running_lines(base_url) >= min(args.concurrency, args.lines))
            loads[condition].append(os.getloadavg()[0])
            ttfts[condition] += interactive(
                base_url, args.interactive, args.interactive_concurrency, args.max_tokens,
                seed, args.input_len,
            )  # fmt: skip
            seed += 1
            loads[condition].append(os.getloadavg()[0])
            if batch is not None:
                done_meanwhile += client.batches.retrieve(batch.id).request_counts.completed
                client.batches.cancel(batch.id)
                cancelled = batch.id
                until(lambda: client.batches.retrieve(cancelled).status == "cancelled")  # noqa: B023
    alone, beside = (
        ttft_row("interactive_alone", ttfts["alone"]),
        ttft_row("interactive_beside_batch", ttfts["beside"]),
    )
    alone["load_avg_1m"] = [min(loads["alone"]), max(loads["alone"])]
    beside["load_avg_1m"] = [min(loads["beside"]), max(loads["beside"])]
    beside["batch_lines_done_meanwhile"] = done_meanwhile
    beside["batch_lines_cut"] = runner_stats(base_url)["cut"] - cut_before
    beside["p50_ratio"] = beside["ttft_p50_ms"] / alone["ttft_p50_ms"]
    beside["p99_ratio"] = beside["ttft_p99_ms"] / alone["ttft_p99_ms"]
    for row in (alone, beside):
        row["run"] = run
        print(json.dumps(row), flush=True)
    return [alone, beside]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("offline", "server", "all"), required=True)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--interactive", type=int, default=32)
    parser.add_argument("--interactive-concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per run")
    parser.add_argument("--runs", type=int, default=2,
                        help="side-by-side runs, each reported on its own")  # fmt: skip
    parser.add_argument("--first-run", type=int, default=0,
                        help="the first run's number (its prompts follow from it)")  # fmt: skip
    parser.add_argument("--input-len", type=int, default=128,
                        help="prompt tokens of an interactive request")  # fmt: skip
    parser.add_argument("--beside", type=int, default=0,
                        help="--batch-concurrency-beside-interactive of the server")  # fmt: skip
    parser.add_argument("--resume-after", type=float, default=2.0,
                        help="--batch-resume-after-s of the server")  # fmt: skip
    parser.add_argument("--prefill-lines", type=int, default=4,
                        help="--batch-prefill-lines of the server")  # fmt: skip
    parser.add_argument("--beside-only", action="store_true", help="skip the batch alone")
    parser.add_argument("--ceiling", type=Path, default=None,
                        help="the offline phase's JSON, for the batch's share of it")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("perf/out/batch"))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    if args.phase in ("offline", "all"):
        rows.append(asyncio.run(offline(args)))
        print(json.dumps(rows[0]), flush=True)
    if args.phase in ("server", "all"):
        rows += server(args)
    by_kind = {row["kind"]: row for row in rows}
    if args.phase == "server" and args.ceiling is not None:  # an earlier offline run
        by_kind["offline"] = json.loads(args.ceiling.read_text())[0]
    if "offline" in by_kind and "batch_alone" in by_kind:
        ratio = by_kind["batch_alone"]["output_tok_s"] / by_kind["offline"]["output_tok_s"]
        rows.append({"kind": "batch_vs_offline", "ratio": ratio})
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.phase}.json").write_text(json.dumps(rows, indent=1))
    return 0
