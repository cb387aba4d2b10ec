"""Fault and soak harness: mixed traffic against a real server, with faults injected.

    python -m perf soak                  # the long run (`make soak`): several minutes
    python -m perf soak --plan short     # about the size of the test in tests/e2e

Traffic: `--concurrency` clients loop over the mix in perf/soak/traffic.py (chat and
completions, streamed and not, n > 1, tools, json_schema, bad inputs, clients that
abandon before the headers, after the first chunk, mid-stream, or mid-way through a
non-streamed request) until the plan ends or `--max-requests` is reached. The plan is a
list of steps, each after a delay from the end of the previous one:

- `burst N`: N requests at once from one client (the next step waits for them);
- `reclaim S`: the GPU's owner comes back for S seconds (the scripted probe's timeline);
- `sigterm`: SIGTERM mid-load; the harness records the exit code and how long the
  drain took, then starts a new server;
- `engine-kill`: SIGKILL vLLM's engine core; the harness records whether the server
  exited (code, seconds) or recovered, and starts a new one if it had to.

A failure (5xx, error event, connection error, client timeout) is put down to a fault
when the request overlapped the fault's window (injection to healthy again) widened by
`--fault-margin` seconds; any other failure is unexplained (target 0). At the end: the
engine's unfinished requests (`lilac_engine_unfinished_requests`, target 0), event-loop
lag p99 from the server's `lilac_event_loop_lag_seconds` histogram, /health latency,
and the RSS of the server and its children per server life. 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from perf.harness.results import output
from perf.harness.servers import IDLE_OWNER, Server, start_lilac, write_timeline
from perf.soak.report import Fault, Life, Report, build_report, lag_buckets
from perf.soak.traffic import PATIENCE_S, Result, Traffic, chat_plain, chat_stream, pick

LONG_PLAN = [
    (20.0, "burst 64"),
    (15.0, "reclaim 5"),
    (25.0, "burst 128"),
    (20.0, "engine-kill"),
    (20.0, "burst 32"),
    (20.0, "sigterm"),
    (20.0, "reclaim 5"),
    (30.0, "end"),
]
SHORT_PLAN = [(8.0, "burst 12"), (6.0, "reclaim 3"), (12.0, "end")]
EXIT_WAIT_S = 30.0  # how long a server may take to exit after its engine core died
BACKOFF_S = 1.0  # after a refusal (429, 503) or a connection error
SETTLE_S = 10.0  # how long abandoned requests may take to leave the engine at the end


@dataclass
class SoakConfig:
    plan: list[tuple[float, str]]
    concurrency: int = 4
    max_tokens: int = 8
    max_requests: int = 5000
    max_wall_s: float = 1200.0
    fault_margin_s: float = 3.0
    seed: int = 0


@dataclass
class ServerSlot:
    """The server under test now; `restart` is None when the harness may not replace it
    (a server shared with other tests)."""

    server: Server
    restart: Callable[[], Server] | None
    lives: list[Life] = field(default_factory=list)
    up: asyncio.Event = field(default_factory=asyncio.Event)


async def run_soak(slot: ServerSlot, config: SoakConfig) -> Report:
    rng = random.Random(config.seed)
    results: list[Result] = []
    faults: list[Fault] = []
    health_latencies: list[float] = []
    started = time.monotonic()
    deadline = started + config.max_wall_s
    log_offset = slot.server.log_path.stat().st_size
    slot.lives.append(await asyncio.to_thread(begin_life, slot.server))
    slot.up.set()
    plan_done = asyncio.Event()
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=50)
    client = httpx.AsyncClient(base_url=slot.server.base_url, limits=limits, timeout=PATIENCE_S)
    async with client as http:

        def traffic() -> Traffic:
            return Traffic(str(http.base_url).rstrip("/"), config.max_tokens, rng)

        async def worker() -> None:
            while not plan_done.is_set() and len(results) < config.max_requests:
                await slot.up.wait()
                result = await pick(rng)(http, traffic())
                results.append(result)
                if result.outcome == "connection error" or result.status in (429, 503):
                    # Back off as a client told to retry later would: a server that
                    # refuses in microseconds must not crowd the mix out with refusals.
                    await asyncio.sleep(BACKOFF_S)

        async def watch_health() -> None:
            while not plan_done.is_set():
                await slot.up.wait()
                sent = time.monotonic()
                try:
                    response = await http.get("/health", timeout=10)
                    if response.status_code == 200:
                        health_latencies.append(time.monotonic() - sent)
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)

        async def burst(size: int) -> None:
            clients = [rng.choice([chat_plain, chat_stream]) for _ in range(size)]
            done = await asyncio.gather(*(client(http, traffic()) for client in clients))
            for result in done:
                result.kind = "burst " + result.kind
            results.extend(done)

        async def run_plan() -> None:
            try:
                for delay, step in config.plan:
                    await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                    if step == "end" or time.monotonic() >= deadline:
                        break
                    name, _, argument = step.partition(" ")
                    if name == "burst":  # the next step waits for the burst's answers
                        await burst(int(argument))
                        continue
                    fault = Fault(step, time.monotonic())
                    faults.append(fault)
                    if name == "reclaim":
                        await reclaim(slot, http, fault, float(argument))
                    elif name == "sigterm":
                        await sigterm(slot, http, fault)
                    elif name == "engine-kill":
                        await engine_kill(slot, http, fault)
                    else:
                        raise ValueError(f"unknown plan step {step!r}")
            finally:
                plan_done.set()

        workers = [asyncio.create_task(worker()) for _ in range(config.concurrency)]
        await asyncio.gather(run_plan(), watch_health(), *workers)
    await asyncio.to_thread(end_life, slot.server, slot.lives[-1])
    report = build_report(
        results,
        faults,
        slot.lives,
        health_latencies,
        time.monotonic() - started,
        config.fault_margin_s,
    )
    report.server_logged_errors = count_logged_errors(slot.server.log_path, log_offset)
    return report


def count_logged_errors(log_path: Path, offset: int) -> int:
    """Unhandled errors the server logged during the run (a client that has gone never
    sees the 500 it was given, but the log does)."""
    with log_path.open("rb") as log:
        log.seek(offset)
        return log.read().count(b"unhandled error")


def begin_life(server: Server) -> Life:
    return Life(server.rss_bytes(), lag_buckets(server.metrics_text()))


def end_life(server: Server, life: Life) -> None:
    """Figures at the end of a life the harness ends: the engine must be empty."""
    deadline = time.monotonic() + SETTLE_S
    unfinished = server.unfinished_requests()
    while unfinished and time.monotonic() < deadline:
        time.sleep(0.25)
        unfinished = server.unfinished_requests()
    life.unfinished_end = unfinished
    life.rss_end = server.rss_bytes()
    life.lag_end = lag_buckets(server.metrics_text())


def snapshot_before_fault(server: Server, life: Life) -> None:
    """A fault may end this life: take its lag and memory figures now."""
    life.rss_end = server.rss_bytes()
    life.lag_end = lag_buckets(server.metrics_text())


async def healthy(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/health", timeout=5)).status_code == 200
    except httpx.TransportError:
        return False


async def reclaim(slot: ServerSlot, http: httpx.AsyncClient, fault: Fault, busy_s: float) -> None:
    slot.server.reclaim_gpu(busy_s)
    saw_yield = False
    limit = time.monotonic() + busy_s + 60
    while time.monotonic() < limit:
        await asyncio.sleep(0.2)
        if not await healthy(http):
            saw_yield = True
        elif saw_yield or time.monotonic() > fault.started + busy_s + 5:
            break
    fault.ended = time.monotonic()
    fault.detail = {"server_stopped_admitting": saw_yield, "busy_s": busy_s}


async def sigterm(slot: ServerSlot, http: httpx.AsyncClient, fault: Fault) -> None:
    server = slot.server
    await asyncio.to_thread(snapshot_before_fault, server, slot.lives[-1])
    server.process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(wait_exit, server, 120.0)
    fault.detail = {"exit_code": code, "exit_after_s": round(time.monotonic() - fault.started, 1)}
    if code is None:
        await asyncio.to_thread(server.kill_all)
    await replace_server(slot, http, fault)


async def engine_kill(slot: ServerSlot, http: httpx.AsyncClient, fault: Fault) -> None:
    server = slot.server
    await asyncio.to_thread(snapshot_before_fault, server, slot.lives[-1])
    core = server.engine_core()
    if core is None:
        fault.detail = {"error": "no engine core process found"}
        fault.ended = time.monotonic()
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        core.kill()
    code = await asyncio.to_thread(wait_exit, server, EXIT_WAIT_S)
    fault.detail = {"server_exit_code": code}
    if code is not None:
        fault.detail["exit_after_s"] = round(time.monotonic() - fault.started, 1)
    elif await healthy(http):
        fault.detail["recovered"] = True
        fault.ended = time.monotonic()
        return
    else:
        fault.detail["still_running_after_s"] = EXIT_WAIT_S
        await asyncio.to_thread(server.kill_all)
    await replace_server(slot, http, fault)


def wait_exit(server: Server, timeout_s: float) -> int | None:
    try:
        return server.process.wait(timeout=timeout_s)
    except Exception:  # subprocess.TimeoutExpired: still running
        return None


async def replace_server(slot: ServerSlot, http: httpx.AsyncClient, fault: Fault) -> None:
    """Start a new server (workers wait meanwhile); the fault's window ends when it is up."""
    slot.up.clear()
    if slot.restart is None:
        raise RuntimeError(f"{fault.name} ended a server the harness may not replace")
    write_timeline(slot.server.timeline, IDLE_OWNER)
    restarted = time.monotonic()
    slot.server = await asyncio.to_thread(slot.restart)
    fault.detail["restart_s"] = round(time.monotonic() - restarted, 1)
    http.base_url = httpx.URL(slot.server.base_url)
    slot.lives.append(await asyncio.to_thread(begin_life, slot.server))
    fault.ended = time.monotonic()
    slot.up.set()


def parse_plan(text: str) -> list[tuple[float, str]]:
    """`20:burst 64,15:reclaim 5,30:end` -> [(20.0, "burst 64"), ...]."""
    steps = []
    for item in text.split(","):
        delay, _, step = item.partition(":")
        steps.append((float(delay), step.strip()))
    return steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", default="long", help="long, short, or `delay:step,...`")
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--max-requests", type=int, default=20000)
    parser.add_argument("--max-wall", type=float, default=1500.0)
    parser.add_argument("--fault-margin", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=output("soak") / "soak.json")
    args = parser.parse_args(argv)
    plan = {"long": LONG_PLAN, "short": SHORT_PLAN}.get(args.plan) or parse_plan(args.plan)
    config = SoakConfig(
        plan=plan,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        max_requests=args.max_requests,
        max_wall_s=args.max_wall,
        fault_margin_s=args.fault_margin,
        seed=args.seed,
    )
    workdir = Path(tempfile.mkdtemp(prefix="lilac-soak-"))
    print(f"soak: server logs in {workdir}", flush=True)
    server = start_lilac(workdir)
    slot = ServerSlot(server, restart=lambda: start_lilac(workdir))
    try:
        report = asyncio.run(run_soak(slot, config))
    finally:
        if slot.server.process.poll() is None:
            slot.server.process.send_signal(signal.SIGTERM)
            if wait_exit(slot.server, 120.0) is None:
                slot.server.kill_all()
    print(report.render())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"config": vars(args) | {"out": str(args.out)}, "report": report.to_json()}, indent=2
        )
    )
