"""Where the HTTP process's CPU goes under load: py-spy on it during one benchmark run.

    python -m perf profile-server ours --concurrency 16 --num-prompts 48
    python -m perf profile-server vllm --concurrency 16 --num-prompts 48

Starts the server as the load benchmark does (`vllm-stats`: `vllm serve` with its default
stats and Prometheus series on, as ours runs, where `vllm` has `--disable-log-stats`),
warms it up, reads the HTTP process's idle CPU (our granian worker, or `vllm serve`'s
API server; nanoseconds from /proc schedstat), then drives it twice with
vllm.benchmarks.serve: once plain, for the CPU per token, and once under `py-spy record`
(on-CPU samples only), for the CPU split by layer (each sample goes to the innermost
frame that belongs to a known layer). The raw profile and a
flame-graph-ready file stay in perf/out/profile-server/.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from perf.harness.results import output
from perf.harness.servers import Server, free_port
from perf.load import benchmark as load
from perf.load.paced_stream import on_cpu

OUT = output("profile-server")

# (layer, path fragments); a sample goes to the first layer, innermost frame first.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("chat template (jinja)", ("engine/templates.py", "jinja2/", "chat_utils.py")),
    ("tokenizer", ("tokenizers/", "transformers/")),
    ("vLLM output processing + detokenize", ("output_processor.py", "detokenizer.py")),
    ("vLLM engine IPC (zmq, msgpack)", ("core_client.py", "serial_utils.py", "zmq/")),
    ("vLLM AsyncLLM / input processing", ("vllm/v1/", "vllm/inputs/", "vllm/sampling_params")),
    ("vllm serve OpenAI layer", ("vllm/entrypoints/", "pydantic")),
    ("HTTP server + framework", ("fastapi/", "starlette/", "uvicorn/", "litestar/", "granian/")),
    ("our app (app/, engine adapter)", ("(app/", "/app/", "engine/vllm_backend/")),
]
EVENT_LOOP = ("asyncio/", "uvloop/", "anyio/", "selectors.py")
# Frames at the bottom of every stack (process start, the loop's run): they say nothing.
ROOTS = (
    "<frozen runpy>",
    "openai/api_server.py",
    "api_server/entry.py",
    "granian/server/",
    "multiprocessing/",
    "app/launch/cli.py",
    "uvloop/__init__.py",
    "asyncio/runners.py",
    "threading.py",
)


def layer_of(stack: list[str]) -> str:
    """The innermost frame of a known layer decides (asyncio called by Litestar counts as
    Litestar); a stack of only root frames is the event loop itself (uvloop's C code,
    socket I/O included)."""
    if not any(stack):
        return "native threads, no Python frame (granian's Rust I/O, zmq)"
    frames = [f for f in stack if f and not any(root in f for root in ROOTS)]
    if not frames:
        return "event loop itself (uvloop C code, socket I/O)"
    for frame in reversed(frames):
        for layer, fragments in LAYERS:
            if any(fragment in frame for fragment in fragments):
                return layer
    if any(fragment in f for f in frames for fragment in EVENT_LOOP):
        return "event loop (asyncio/anyio Python)"
    return "other"


def summarize(raw: Path) -> str:
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, number = line.rpartition(" ")
        counts[layer_of(stack.split(";"))] += int(number)
    total = sum(counts.values()) or 1
    lines = ["| layer | share of on-CPU samples |", "| --- | ---: |"]
    lines += [f"| {name} | {100 * n / total:.0f}% |" for name, n in counts.most_common()]
    return "\n".join(lines) + f"\n\n{total} samples"


def _spy(binary: str, pid: int, rate: int, raw: Path) -> subprocess.Popen[bytes]:
    argv = [binary, "record", "-p", str(pid), "-r", str(rate), "--nonblocking"]
    return subprocess.Popen(
        [*argv, "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )


def main(argv: list[str] | None = None) -> int:
    from engine.checkpoint import default_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["ours", "vllm", "vllm-stats"])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--idle-s", type=float, default=4.0, help="idle CPU read before the runs")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    model_dir = str(default_model_dir())
    OUT.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {"VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib), "HF_HUB_OFFLINE": "1"}
    server_argv = load.server_argv(args.kind, args, model_dir, port)
    server = Server(server_argv, OUT / f"{args.kind}-server.log", port=port, env=env)
    try:
        server.wait_healthy(300)
        bench = load.bench_argv(args, model_dir)
        load.run_client(bench, port, 1, 1, f"{args.kind}-warmup", load.WARM_UP_SEED)
        http = server.http_process(granian=args.kind == "ours")
        time.sleep(1)
        cpu0, t0 = on_cpu(http.pid), time.monotonic()
        time.sleep(args.idle_s)
        idle = (on_cpu(http.pid) - cpu0) / (time.monotonic() - t0)
        # Unprofiled first: py-spy reads the process from outside, but it takes a core
        # of the two from the process it watches.
        runs = {}
        for label, seed, profiled in (("plain", 7, False), ("profiled", 8, True)):
            raw = OUT / f"{args.kind}.raw.txt"
            recorder = _spy(spy, http.pid, args.rate, raw) if profiled else None
            time.sleep(1)
            load_before, cpu0, t0 = os.getloadavg()[0], on_cpu(http.pid), time.monotonic()
            result = load.run_client(
                bench, port, args.concurrency, args.num_prompts, f"{args.kind}-{label}", seed
            )
            cpu, wall = on_cpu(http.pid) - cpu0, time.monotonic() - t0
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait(60)
            runs[label] = (result["total_output_tokens"], cpu, wall, load_before)
    finally:
        server.stop()
    lines = [f"{args.kind}: idle {1000 * idle:.2f} ms/s of HTTP-process CPU"]
    for label, (tokens, cpu, wall, load_before) in runs.items():
        lines.append(
            f"{label}: {tokens} output tokens in {wall:.1f} s, HTTP-process CPU {cpu:.3f} s, "
            f"{1000 * cpu / tokens:.3f} s per 1k tokens ({1000 * (cpu - idle * wall) / tokens:.3f}"
            f" above idle), load {load_before:.2f} / {os.getloadavg()[0]:.2f}"
        )
    text = "\n".join(lines) + f"\n\n{summarize(raw)}"
    print(text)
    (OUT / f"{args.kind}.md").write_text(text + "\n")
    return 0
