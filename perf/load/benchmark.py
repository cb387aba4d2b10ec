"""Side-by-side load benchmark: our server vs `vllm serve` vs the same engine offline.

    python -m perf load [--concurrency 1,4,16,64] [--num-prompts 4,8,32,64] \\
        [--input-len 128] [--output-len 64] [--only ours,vllm,offline] [--check]
    python -m perf load --only ours-tuned,vllm --tuned-flags "--max-num-batched-tokens 1024"

`ours-tuned` is our server with `--tuned-flags` added to its command line and
`--tuned-env KEY=VALUE` (repeatable) to its environment: an engine setting measured
against `vllm serve`'s defaults before it becomes ours. `ours-process` is our server with
`--engine-frontend-process true` (the default, `auto`, turns it on for one model); its
frontend process's CPU is reported in a column of its own. The other `ours` kinds run
with `--engine-frontend-process false`, vLLM's frontend in the HTTP process, as the
recorded results ran them.

Each server is started alone on 127.0.0.1 with the same engine flags (float32, eager,
max-model-len 2048, the same KV cache and memory fraction), warmed up with one request,
then driven by vLLM's own serving benchmark (`vllm.benchmarks.serve`, random dataset,
openai-chat backend, which sends `ignore_eos` for random prompts) at each concurrency.
Around each run the CPU time of the server's HTTP process is read with psutil: for ours
the granian worker that embeds the AsyncLLM frontend, for `vllm serve` its API-server
process; never the engine core. The offline ceiling (perf/load/offline.py) runs the same
prompts through the same engine in one process without HTTP. Results: perf/out/load/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Any

import psutil

from perf.harness.results import output
from perf.harness.servers import Server, cpu_seconds, free_port, lilac_argv, vllm_argv
from perf.load.report import report

OUT = output("load")
NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"


def server_argv(kind: str, args: argparse.Namespace, model_dir: str, port: int) -> list[str]:
    common = ["--model", model_dir, "--served-model-name", NAME]
    common += ["--max-model-len", str(args.max_model_len)]
    common += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    if kind.startswith("ours"):  # float32 + eager are its CPU defaults
        # ours-noadmit: the same server with the admission lease skipped (the cost of
        # the controller); ours-default: admission's default limits.
        argv = lilac_argv(
            port,
            *common,
            *("--dtype", "float32", "--enforce-eager", "true"),
            *("--cpu-kvcache-space-gib", str(args.kv_cache_gib), "--log-level", "warning"),
        )
        if kind == "ours-noadmit":  # the same command line, through perf/load/no_admission.py
            argv[:1] = [sys.executable, "-m", "perf", "no-admission"]
        if kind != "ours-default":
            # `vllm serve` has no admission limits: lift ours above the largest concurrency.
            argv += ["--max-concurrent", "1024", "--max-queued", "1024"]
        # The engine's frontend: in a process of its own for ours-process; in the HTTP
        # process, where the recorded results (docs/results.md) ran it, for the others.
        argv += ["--engine-frontend-process", "true" if kind == "ours-process" else "false"]
        if kind == "ours-tuned":
            argv += shlex.split(args.tuned_flags)
        return argv
    # granian logs no access line: the same. `vllm-stats` keeps vLLM's stats on (its
    # Prometheus series and periodic log line), as our server keeps its `vllm:` series.
    stats = () if kind == "vllm-stats" else ("--disable-log-stats",)
    return vllm_argv(
        port,
        *common,
        *("--dtype", "float32", "--enforce-eager", "--seed", "0"),
        *(*stats, "--disable-uvicorn-access-log"),
    )


def bench_argv(args: argparse.Namespace, model_dir: str) -> list[str]:
    """vllm.benchmarks.serve arguments shared by every run (and by the offline prompts)."""
    return [
        *("--backend", "openai-chat", "--endpoint", "/v1/chat/completions"),
        *("--dataset-name", "random"),
        *("--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len)),
        *("--model", model_dir, "--served-model-name", NAME, "--tokenizer", model_dir),
        *("--temperature", str(args.temperature), "--num-warmups", "0"),
        *("--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99"),
        *("--ready-check-timeout-sec", "0", "--disable-tqdm"),
    ]


def run_seed(concurrency: int) -> int:
    """Each run gets its own prompts (the same for every server and the offline engine): a
    prompt seen in an earlier run would hit vLLM's prefix cache and skip its prefill."""
    return 1000 + concurrency


WARM_UP_SEED = 999


def run_client(
    argv: list[str], port: int, concurrency: int, num_prompts: int, label: str, seed: int
) -> dict:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            *argv,
            *("--port", str(port), "--max-concurrency", str(concurrency)),
            *("--num-prompts", str(num_prompts), "--seed", str(seed)),
            *("--label", label, "--save-result"),
            *("--result-dir", str(OUT), "--result-filename", f"{label}-c{concurrency}.json"),
        ]
    )
    return main(args)


def run_server(kind: str, args: argparse.Namespace, model_dir: str) -> list[dict[str, Any]]:
    port = free_port()
    env = {"VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib), "HF_HUB_OFFLINE": "1"}
    if kind == "ours-tuned":
        env.update(item.split("=", 1) for item in args.tuned_env)
    print(f"\n=== {kind}: starting on port {port}", flush=True)
    argv = server_argv(kind, args, model_dir, port)
    server = Server(argv, OUT / f"{kind}-server.log", port=port, env=env)
    rows = []
    try:
        started = time.monotonic()
        server.wait_healthy(args.start_timeout)
        print(f"=== {kind}: healthy after {time.monotonic() - started:.0f}s", flush=True)
        # Warm up with one request like the measured ones (as the offline run does).
        run_client(bench_argv(args, model_dir), port, 1, 1, f"{kind}-warmup", WARM_UP_SEED)
        http = server.http_process(granian=kind.startswith("ours"))
        engines = server.engine_processes()
        frontends = frontend_processes(server)
        print(f"=== {kind}: HTTP pid {http.pid}, engine pids {[p.pid for p in engines]}")
        for concurrency, num_prompts in zip(args.concurrency, args.num_prompts, strict=True):
            load_before = os.getloadavg()[0]
            cpu0 = cpu_seconds(http)
            engine0 = sum(cpu_seconds(p) for p in engines)
            frontend0 = sum(cpu_seconds(p) for p in frontends)
            seed = run_seed(concurrency)
            result = run_client(
                bench_argv(args, model_dir), port, concurrency, num_prompts, kind, seed
            )
            result["http_cpu_s"] = cpu_seconds(http) - cpu0
            result["engine_cpu_s"] = sum(cpu_seconds(p) for p in engines) - engine0
            result["frontend_cpu_s"] = sum(cpu_seconds(p) for p in frontends) - frontend0
            result.update(kind=kind, concurrency=concurrency, num_prompts=num_prompts)
            result["load_avg_1m"] = os.getloadavg()[0]
            result["load_avg_1m_before"] = load_before
            rows.append(result)
    finally:
        server.stop()
    return rows


def frontend_processes(server: Server) -> list[Any]:
    """The engine's frontend process of `--engine-frontend-process true` (engine.remote),
    measured apart from the HTTP process and the engine core."""
    found = []
    for process in server.processes()[1:]:
        try:
            if "engine.remote.child" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:  # gone meanwhile
            continue
    return found


def run_offline(args: argparse.Namespace, model_dir: str) -> list[dict[str, Any]]:
    print("\n=== offline: starting the engine in process", flush=True)
    spec = {
        "engine": {
            "model": model_dir,
            "served_names": [NAME],
            "dtype": "float32",
            "max_model_len": args.max_model_len,
            "enforce_eager": True,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "seed": 0,
        },
        "env": {"VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib), "HF_HUB_OFFLINE": "1"},
        "bench": {"argv": bench_argv(args, model_dir), "model_dir": model_dir},
        "temperature": args.temperature,
        "runs": [
            [c, n, run_seed(c)] for c, n in zip(args.concurrency, args.num_prompts, strict=True)
        ],
        "warm_up_seed": WARM_UP_SEED,
    }
    spec_path, out_path = OUT / "offline_spec.json", OUT / "offline.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    argv = [
        sys.executable,
        "-m",
        "perf",
        "offline",
        "--spec",
        str(spec_path),
        "--out",
        str(out_path),
    ]
    with (OUT / "offline.log").open("wb") as log:
        finished = subprocess.run(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **spec["env"]},
            timeout=args.start_timeout + 60 * len(args.concurrency) * 5,
            check=False,
        )
    if finished.returncode != 0:
        raise RuntimeError(f"offline run failed; see {OUT / 'offline.log'}")
    rows = json.loads(out_path.read_text())
    for row in rows:
        row["kind"] = "offline"
    return rows


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    from engine.checkpoint import default_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=_ints, default=[1, 4, 16, 64])
    parser.add_argument("--num-prompts", type=_ints, default=[8, 8, 32, 64])
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--only",
        default="ours,vllm,offline",
        help="which to run, in order (also: ours-default, ours-noadmit, ours-tuned, "
        "ours-process, vllm-stats)",
    )
    parser.add_argument(
        "--tuned-flags", default="", help="more lilac-serve flags for the ours-tuned run"
    )
    parser.add_argument(
        "--tuned-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for the ours-tuned run (repeatable)",
    )
    parser.add_argument("--model-dir", default=None, help="default: the prepared SmolLM2")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--check", action="store_true", help="exit 1 unless every target is met")
    args = parser.parse_args(argv)
    if len(args.concurrency) != len(args.num_prompts):
        parser.error("--concurrency and --num-prompts need the same number of values")
    model_dir = args.model_dir or str(default_model_dir())
    OUT.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for kind in args.only.split(","):
        rows += (
            run_offline(args, model_dir) if kind == "offline" else run_server(kind, args, model_dir)
        )
        (OUT / "rows.json").write_text(json.dumps(rows, indent=1, default=str))
    meta = vars(args) | {
        "wall_s": round(time.monotonic() - started),
        "commit": _commit(),
        "machine": f"{platform.node()}, {os.cpu_count()} cpus",
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    text, met = report(rows, meta)
    print("\n" + text)
    (OUT / "summary.md").write_text(text + "\n")
    return 0 if met or not args.check else 1
