"""Where the HTTP process's CPU goes under load: py-spy on it during one benchmark run.

    python -m perf profile-server ours --concurrency 16 --num-prompts 48
    python -m perf profile-server vllm --concurrency 16 --num-prompts 48

Starts the server as the load benchmark does, warms it up, records the HTTP process (our
granian worker, or `vllm serve`'s API server) with `py-spy record` (on-CPU samples only)
while vllm.benchmarks.serve drives it, then prints the CPU split by layer (each sample
goes to the innermost frame that belongs to a known layer). The raw profile and a
flame-graph-ready file stay in perf/out/profile-server/.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from perf.harness.results import output
from perf.harness.servers import Server, cpu_seconds, free_port
from perf.load import benchmark as load

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
    ("our app (app/, engine adapter)", ("(app/", "/app/", "engine/vllm_backend/engine.py")),
]
EVENT_LOOP = ("asyncio/", "uvloop/", "anyio/", "selectors.py")
# Frames at the bottom of every stack (process start, the loop's run): they say nothing.
ROOTS = (
    "<frozen runpy>",
    "openai/api_server.py",
    "api_server/entry.py",
    "granian/server/",
    "multiprocessing/",
    "app/cli.py",
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


def main(argv: list[str] | None = None) -> int:
    from engine.checkpoint import default_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["ours", "vllm"])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
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
        raw = OUT / f"{args.kind}.raw.txt"
        spy_argv = [spy, "record", "-p", str(http.pid), "-r", str(args.rate), "--nonblocking"]
        recorder = subprocess.Popen(
            [*spy_argv, "-f", "raw", "-o", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        time.sleep(1)
        cpu0 = cpu_seconds(http)
        result = load.run_client(
            bench, port, args.concurrency, args.num_prompts, f"{args.kind}-profile", 7
        )
        cpu = cpu_seconds(http) - cpu0
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)
    finally:
        server.stop()
    tokens = result["total_output_tokens"]
    text = (
        f"{args.kind}: {tokens} output tokens, HTTP-process CPU {cpu:.2f} s "
        f"({1e6 * cpu / tokens:.0f} us per output token)\n\n{summarize(raw)}"
    )
    print(text)
    (OUT / f"{args.kind}.md").write_text(text + "\n")
    return 0
