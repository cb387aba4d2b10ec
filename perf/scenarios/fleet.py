"""Two lilac-serve replicas behind sglang-router, one replica's owner back mid-load.

A load generator drives the router while one replica's owner comes back (its scripted
GPU probe's timeline file is rewritten). Measures how long the router takes to stop
sending that replica new work, the failures clients see, when it takes traffic again,
and requests per replica over time (from each replica's own /metrics).

    python -m perf fleet               # the long run, on the default model (make fleet-demo)
    python -m perf fleet --scripted    # the same over the scripted engine (seconds)

The e2e test (tests/e2e/test_fleet.py) runs the short scripted form.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.results import output
from perf.harness.servers import LILAC, ROOT, Server, free_port, scripted_argv

IDLE_TIMELINE = "0 0  # the owner is idle\n"
# What docs/fleet.md recommends, with a 1 s health interval to keep the test short.
ROUTER_FLAGS = [
    "--policy", "round_robin",
    "--health-check-endpoint", "/health",
    "--health-check-interval-secs", "1",
    "--health-check-timeout-secs", "2",
    "--health-failure-threshold", "2",
    "--health-success-threshold", "1",
    "--worker-startup-check-interval", "1",
    "--worker-startup-timeout-secs", "600",
    "--retry-max-retries", "6",
    "--retry-initial-backoff-ms", "100",
    "--retry-backoff-multiplier", "2",
    "--retry-max-backoff-ms", "2000",
    "--cb-failure-threshold", "5",
    "--cb-timeout-duration-secs", "5",
    "--log-level", "warn",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class FleetConfig:
    scripted: bool  # the scripted engine (seconds to start) or the default model (minutes)
    load_s: float  # how long the clients send
    reclaim_at_s: float  # when (into the load) replica B's owner comes back
    owner_active_s: float  # how long the owner works
    concurrency: int  # client loops, each one request at a time
    max_tokens: int
    router_port: int
    router_metrics_port: int
    replica_ports: tuple[int, int]
    workdir: Path


@dataclass(slots=True)
class Sample:
    at: float  # seconds since the load started
    offered: tuple[float, float]  # chat requests each replica admitted or refused, so far
    ready: tuple[bool, bool]  # each replica's /health is 200


@dataclass(slots=True)
class Report:
    requests: int = 0
    failures: int = 0
    failure_statuses: dict[str, int] = field(default_factory=dict)
    reclaim_at_s: float = 0.0
    unready_at_s: float | None = None  # B's /health first answered 503
    last_offer_to_b_s: float | None = None  # B last got a request after turning unready
    ready_again_at_s: float | None = None
    first_offer_after_s: float | None = None  # B's first request after it is ready again
    refused_by_b: float = 0.0  # requests B answered 503 while not admitting (router retried)
    metrics_before: dict[str, float] = field(default_factory=dict)  # replica A's, by series
    metrics_after: dict[str, float] = field(default_factory=dict)
    per_replica_per_bucket: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def stop_routing_s(self) -> float | None:
        """From B's /health turning 503 to the router's last request to B."""
        if self.unready_at_s is None or self.last_offer_to_b_s is None:
            return None
        return max(0.0, self.last_offer_to_b_s - self.unready_at_s)

    @property
    def rejoin_s(self) -> float | None:
        if self.ready_again_at_s is None or self.first_offer_after_s is None:
            return None
        return self.first_offer_after_s - self.ready_again_at_s

    def lines(self) -> list[str]:
        def show(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f} s"

        out = [
            f"client requests: {self.requests}, failures: {self.failures} "
            f"{self.failure_statuses or ''}",
            f"owner of B back at {self.reclaim_at_s:.2f} s; B /health 503 at "
            f"{show(self.unready_at_s)}; last request routed to B at "
            f"{show(self.last_offer_to_b_s)} -> router stopped after {show(self.stop_routing_s)}",
            f"requests B refused with 503 meanwhile (retried by the router): "
            f"{self.refused_by_b:.0f}",
            f"B /health 200 again at {show(self.ready_again_at_s)}; first request routed to B "
            f"at {show(self.first_offer_after_s)} -> rejoined after {show(self.rejoin_s)}",
            "requests per replica (A, B) by start time:",
        ]
        out += [f"  {at:6.1f} s  A {a:4d}  B {b:4d}" for at, a, b in self.per_replica_per_bucket]
        out.append("replica A's /metrics before -> after the load:")
        for name, after in self.metrics_after.items():
            out.append(f"  {name} {self.metrics_before.get(name, 0.0):g} -> {after:g}")
        return out


def _replica_settings(timeline: Path, port: int) -> list[str]:
    return [
        "--port", str(port),
        "--gpu-probe", f"scripted:{timeline}",
        "--probe-interval", "0.25",
        "--resume-after", "1",
        "--grace-period", "10",
        "--log-format", "json",
        "--cpu-kvcache-space-gib", "1",
        "--max-model-len", "1024",
    ]  # fmt: skip


def _start_replica(config: FleetConfig, index: int) -> Server:
    port = config.replica_ports[index]
    timeline = config.workdir / f"owner-{index}.timeline"
    timeline.write_text(IDLE_TIMELINE)
    log = config.workdir / f"replica-{index}.log"
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    flags = _replica_settings(timeline, port)
    if config.scripted:
        from app.config.sources import parse_args

        env["LILAC_SETTINGS_JSON"] = json.dumps(_settings_json(parse_args(flags)))
        command = scripted_argv(port, "build")
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        command = [LILAC, "serve", *flags]
    return Server(command, log, port=port, env=env, cwd=ROOT, timeline=timeline)


def _settings_json(settings: object) -> object:
    import msgspec

    return msgspec.to_builtins(settings)


def _start_router(config: FleetConfig) -> Server:
    log = config.workdir / "router.log"
    workers = [f"http://127.0.0.1:{port}" for port in config.replica_ports]
    command = [
        sys.executable, "-m", "sglang_router.launch_router",
        "--host", "127.0.0.1", "--port", str(config.router_port),
        "--worker-urls", *workers,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(config.router_metrics_port),
        *ROUTER_FLAGS,
    ]  # fmt: skip
    return Server(command, log, port=config.router_port, cwd=ROOT)


# Series shown before and after the load (summed over their labels).
WATCHED = (
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_count",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:request_queue_time_seconds_count",
    "lilac_http_requests_total",
    "lilac_admission_admitted_total",
    "lilac_admission_queue_wait_seconds_count",
)


def watched_series(metrics_text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in WATCHED:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def offered_requests(metrics_text: str) -> float:
    """Chat requests a replica admitted or refused (counted when they arrive)."""
    total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name in ("lilac_admission_admitted", "lilac_admission_rejections"):
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


def refused_while_unready(metrics_text: str) -> float:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "lilac_admission_rejections":
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels["reason"] in ("draining", "yielded")
            )
    return 0.0


async def _sample_replicas(
    http: httpx.AsyncClient, urls: list[str], started: float, stop: asyncio.Event
) -> list[Sample]:
    samples: list[Sample] = []
    while not stop.is_set():
        metrics = await asyncio.gather(*(http.get(f"{u}/metrics") for u in urls))
        health = await asyncio.gather(*(http.get(f"{u}/health") for u in urls))
        samples.append(
            Sample(
                time.monotonic() - started,
                (offered_requests(metrics[0].text), offered_requests(metrics[1].text)),
                (health[0].status_code == 200, health[1].status_code == 200),
            )
        )
        await asyncio.sleep(0.2)
    return samples


async def _client(
    http: httpx.AsyncClient, url: str, model: str, max_tokens: int, until: float, report: Report
) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
    }
    while time.monotonic() < until:
        report.requests += 1
        try:
            response = await http.post(url, json=body)
            status = str(response.status_code)
            ok = response.status_code == 200 and response.json()["choices"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            status, ok = type(exc).__name__, False
        if not ok:
            report.failures += 1
            report.failure_statuses[status] = report.failure_statuses.get(status, 0) + 1


async def drive(config: FleetConfig, model: str) -> Report:
    urls = [f"http://127.0.0.1:{port}" for port in config.replica_ports]
    router = f"http://127.0.0.1:{config.router_port}/v1/chat/completions"
    report = Report(reclaim_at_s=config.reclaim_at_s)
    stop = asyncio.Event()
    async with httpx.AsyncClient(timeout=120) as http:
        report.metrics_before = watched_series((await http.get(f"{urls[0]}/metrics")).text)
        started = time.monotonic()
        sampler = asyncio.create_task(_sample_replicas(http, urls, started, stop))
        until = started + config.load_s
        clients = [
            asyncio.create_task(_client(http, router, model, config.max_tokens, until, report))
            for _ in range(config.concurrency)
        ]
        await asyncio.sleep(config.reclaim_at_s)
        # The owner of B starts working now, for owner_active_s, then goes idle again.
        (config.workdir / "owner-1.timeline").write_text(
            f"0 95 8000  # the owner is back\n{config.owner_active_s} 0  # idle again\n"
        )
        await asyncio.gather(*clients)
        stop.set()
        samples = await sampler
        final = await http.get(f"{urls[1]}/metrics")
        report.metrics_after = watched_series((await http.get(f"{urls[0]}/metrics")).text)
    report.refused_by_b = refused_while_unready(final.text)
    _analyse(samples, report)
    return report


def _analyse(samples: list[Sample], report: Report, bucket_s: float = 2.0) -> None:
    after = [s for s in samples if s.at >= report.reclaim_at_s]
    unready = next((s for s in after if not s.ready[1]), None)
    if unready is not None:
        report.unready_at_s = unready.at
        back = next((s for s in samples if s.at > unready.at and s.ready[1]), None)
        window = [s for s in samples if s.at >= unready.at and (back is None or s.at < back.at)]
        last = None
        for previous, current in pairwise(window):
            if current.offered[1] > previous.offered[1]:
                last = current.at
        report.last_offer_to_b_s = last if last is not None else unready.at
        if back is not None:
            report.ready_again_at_s = back.at
            base = back.offered[1]
            first = next((s for s in samples if s.at > back.at and s.offered[1] > base), None)
            report.first_offer_after_s = first.at if first is not None else None
    edges: list[Sample] = []
    for sample in samples:
        if not edges or sample.at - edges[-1].at >= bucket_s:
            edges.append(sample)
    edges.append(samples[-1])
    for start, end in pairwise(edges):
        a = int(end.offered[0] - start.offered[0])
        b = int(end.offered[1] - start.offered[1])
        report.per_replica_per_bucket.append((start.at, a, b))


@contextmanager
def fleet(config: FleetConfig) -> Iterator[None]:
    """Both replicas and the router, up and routing; stopped on exit."""
    servers: list[Server] = []
    try:
        servers += [_start_replica(config, i) for i in (0, 1)]
        startup_s = 300 if config.scripted else 1800  # imports and engines on a busy box
        for replica in servers:
            replica.wait_healthy(startup_s)
        router = _start_router(config)
        servers.append(router)
        router.wait_healthy(120)
        _wait_for_both_routed(config, router)
        yield
    finally:
        for server in servers:  # all draining at once, then each waited for
            server.terminate()
        for server in servers:
            server.stop()


def _wait_for_both_routed(config: FleetConfig, router: Server, deadline_s: float = 60) -> None:
    """Until the router has registered both workers (`GET /workers`)."""
    deadline = time.monotonic() + deadline_s
    url = f"http://127.0.0.1:{config.router_port}/workers"
    while time.monotonic() < deadline:
        if router.process.poll() is not None:
            raise RuntimeError(f"router exited\n{router.log_tail()}")
        try:
            text = httpx.get(url, timeout=2).text
            if all(str(port) in text for port in config.replica_ports):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"router did not register both workers\n{router.log_tail()}")


def run(config: FleetConfig) -> Report:
    model = "scripted" if config.scripted else DEFAULT_MODEL_NAME
    with fleet(config):
        return asyncio.run(drive(config, model))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripted", action="store_true", help="the scripted engine")
    parser.add_argument("--load-s", type=float, default=60.0)
    parser.add_argument("--reclaim-at-s", type=float, default=15.0)
    parser.add_argument("--owner-active-s", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--workdir", default=str(output("fleet")))
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = FleetConfig(
        scripted=args.scripted,
        load_s=args.load_s,
        reclaim_at_s=args.reclaim_at_s,
        owner_active_s=args.owner_active_s,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        router_port=free_port(),
        router_metrics_port=free_port(),
        replica_ports=(free_port(), free_port()),
        workdir=workdir.resolve(),
    )
    report = run(config)
    print("\n".join(report.lines()))
    print(f"(logs in {workdir}; load average {os.getloadavg()[0]:.2f})")
    return 0 if report.failures == 0 else 1
