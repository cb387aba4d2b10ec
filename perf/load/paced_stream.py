"""Paced streams: the HTTP process's CPU per token when tokens come slowly, as on a CPU box.

    python -m perf paced-stream [--concurrency 1,16] [--duration 8] [--rounds 1]

Our app over the scripted engine (`python -m perf scripted-app --factory build`: a
token every 50 ms a stream) under granian, driven by keep-alive streaming clients of 32
tokens a request. It reports the granian worker's CPU while idle (ms a second: the
process's periodic work) and under the streams (µs a token, idle included), and per
thread the voluntary context switches a token: at a few tokens a second each token
wakes the event loop and granian's I/O thread, and on a small VM a wake-up costs about
0.1 ms, so wake-ups rather than Python decide the cost. CPU is read from
/proc/PID/task/*/schedstat (nanoseconds), not the 10 ms ticks of `cpu_times`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from perf.harness.results import output
from perf.harness.servers import Server, free_port, scripted_argv

OUT = output("paced-stream")
BODY = json.dumps(
    {
        "model": "scripted",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 32,
        "ignore_eos": True,
        "stream": True,
    }
).encode()


def thread_stats(pid: int) -> dict[str, tuple[str, int, float]]:
    """Per thread: its name, voluntary context switches and CPU seconds."""
    stats = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = Path(f"/proc/{pid}/task/{tid}")
        try:
            status = (base / "status").read_text()
            switches = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            cpu = int((base / "schedstat").read_text().split()[0]) / 1e9
            stats[tid] = ((base / "comm").read_text().strip(), switches, cpu)
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return stats


def on_cpu(pid: int) -> float:
    return sum(cpu for _, _, cpu in thread_stats(pid).values())


async def _client(port: int, until: float, tally: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    )
    try:
        while time.monotonic() < until:
            writer.write(head.encode() + BODY)
            window = b""
            while b"data: [DONE]" not in window:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                window += data
            while not window.endswith(b"0\r\n\r\n"):
                window += await reader.read(64)
            tally[0] += window.count(b'"delta":')
    finally:
        writer.close()


async def drive(port: int, concurrency: int, seconds: float) -> int:
    tally = [0]
    until = time.monotonic() + seconds
    await asyncio.gather(*(_client(port, until, tally) for _ in range(concurrency)))
    return tally[0]


def measure(pid: int, port: int, concurrency: int, seconds: float) -> dict[str, object]:
    asyncio.run(drive(port, concurrency, 1.0))  # warm-up
    time.sleep(1.0)
    cpu0, t0 = on_cpu(pid), time.monotonic()
    time.sleep(4.0)
    idle = (on_cpu(pid) - cpu0) / (time.monotonic() - t0)
    before, t0 = thread_stats(pid), time.monotonic()
    tokens = asyncio.run(drive(port, concurrency, seconds))
    wall, after = time.monotonic() - t0, thread_stats(pid)
    cpu = sum(c for _, _, c in after.values()) - sum(c for _, _, c in before.values())
    threads = {
        f"{name} {tid}": {
            "wakes_per_token": round((switches - before[tid][1]) / tokens, 2),
            "cpu_us_per_token": round(1e6 * (cpu_s - before[tid][2]) / tokens),
        }
        for tid, (name, switches, cpu_s) in after.items()
        if tid in before and switches > before[tid][1]
    }
    return {
        "concurrency": concurrency,
        "tokens_per_s": round(tokens / wall, 1),
        "idle_ms_per_s": round(1000 * idle, 2),
        "cpu_us_per_token": round(1e6 * cpu / tokens),
        "load_avg_1m": os.getloadavg()[0],
        "threads": threads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16", help="comma-separated")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for _ in range(args.rounds):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            port = free_port()
            server = Server(scripted_argv(port, "build"), OUT / "server.log", port=port)
            try:
                server.wait_healthy(60)
                pid = server.http_process(granian=True).pid
                row = measure(pid, port, concurrency, args.duration)
            finally:
                server.stop()
            rows.append(row)
            print(
                f"c={concurrency}: {row['tokens_per_s']} tok/s, {row['cpu_us_per_token']} µs "
                f"a token, idle {row['idle_ms_per_s']} ms/s, load {row['load_avg_1m']:.1f}",
                flush=True,
            )
            for name, figures in row["threads"].items():  # type: ignore[attr-defined]
                print(f"    {name}: {figures}")
    (OUT / "paced_stream.json").write_text(json.dumps(rows, indent=1))
    return 0
