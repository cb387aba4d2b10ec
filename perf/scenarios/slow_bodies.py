"""Half-sent bodies: many connections from one client send half a body, then stop.

Each sends its headers and half a JSON body. Measured: what the server does with each
(a 429 at once, past the per-client bound; a 408 at the read timeout; nothing, left
open) and when it closes it, and what a second client, from another loopback address,
sees meanwhile: its request latency before and during.

    python -m perf slow-bodies [--connections 1000] [--body-read-timeout-s 30]
                               [--per-client 64] [--url http://127.0.0.1:8000]

Without `--url` it starts our app over the scripted engine (`python -m perf
scripted-app --factory build`) with those two settings; with it, the settings are the
running server's own (say them with the same flags, for the report). The second
client's request is a one-token chat completion (the scripted engine's token takes
50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import msgspec

from app.config.settings import Settings
from perf.harness.servers import ROOT, Server, free_port, scripted_argv

CHAT = json.dumps(
    {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
).encode()
# The second client: loopback, but another address than the dripping client's.
OTHER_ADDRESS = "127.0.0.2"


def half_sent(host: str, port: int, path: str = "/v1/chat/completions") -> socket.socket:
    """A connection that sent its headers and half its body, and will send no more."""
    sock = socket.create_connection((host, port), timeout=10)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(CHAT)}\r\n\r\n"
    ).encode()
    sock.sendall(head + CHAT[: len(CHAT) // 2])
    sock.setblocking(False)
    return sock


@dataclass
class Outcome:
    """What one connection got: the status of the answer (None: none), and when (seconds
    after it was opened) the server closed it (None: still open)."""

    opened: float
    status: int | None = None
    closed_after_s: float | None = None
    received: bytes = b""

    def note(self, chunk: bytes, now: float) -> None:
        if not chunk:
            self.closed_after_s = now - self.opened
            if self.received.startswith(b"HTTP/1.1 "):
                self.status = int(self.received[9:12])
            return
        self.received += chunk[: 4096 - len(self.received)]


def watch(sockets: dict[socket.socket, Outcome], until: float) -> None:
    """Read every socket until the server closes it or `until` (monotonic) passes."""
    with selectors.DefaultSelector() as selector:
        for sock, outcome in sockets.items():
            selector.register(sock, selectors.EVENT_READ, (sock, outcome))
        open_ones = len(sockets)
        while open_ones and time.monotonic() < until:
            for key, _ in selector.select(timeout=max(0.0, until - time.monotonic())):
                reading: socket.socket = key.data[0]
                try:
                    chunk = reading.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                key.data[1].note(chunk, time.monotonic())
                if not chunk:
                    selector.unregister(reading)
                    open_ones -= 1


def open_many(host: str, port: int, count: int) -> dict[socket.socket, Outcome]:
    return {half_sent(host, port): Outcome(time.monotonic()) for _ in range(count)}


def latencies(base_url: str, count: int) -> list[float]:
    """Seconds each of `count` one-token chat completions takes, one after another, from
    `OTHER_ADDRESS` over one kept-alive connection."""
    transport = httpx.HTTPTransport(local_address=OTHER_ADDRESS)
    seconds: list[float] = []
    with httpx.Client(base_url=base_url, transport=transport, timeout=30) as http:
        http.get("/health")
        for _ in range(count):
            started = time.perf_counter()
            response = http.post("/v1/chat/completions", content=CHAT, headers=_JSON)
            seconds.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text
    return seconds


_JSON = {"Content-Type": "application/json"}


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    by_status: dict[str, int] = {}
    for outcome in outcomes:
        name = "open" if outcome.closed_after_s is None else str(outcome.status or "closed")
        by_status[name] = by_status.get(name, 0) + 1
    closes: dict[str, list[float]] = {}
    for outcome in outcomes:
        if outcome.closed_after_s is not None:
            closes.setdefault(str(outcome.status), []).append(outcome.closed_after_s)
    return {
        "connections": by_status,
        "closed_after_s": {
            status: {"min": round(min(times), 3), "max": round(max(times), 3)}
            for status, times in closes.items()
        },
    }


def run(base_url: str, connections: int, timeout_s: float, samples: int) -> dict[str, object]:
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    before = latencies(base_url, samples)
    sockets = open_many(host, port, connections)
    opened = time.monotonic()
    with ThreadPoolExecutor(1) as pool:  # the second client while the sockets are watched
        during = pool.submit(latencies, base_url, samples)
        watch(sockets, opened + timeout_s + 10)
    for sock in sockets:
        sock.close()
    return {
        "before": _ms(before),
        "during": _ms(during.result()),
        "opened_in_s": round(opened - min(o.opened for o in sockets.values()), 3),
        **summary(list(sockets.values())),
    }


def scripted_server(
    workdir: Path, timeout_s: float, per_client: int, log_level: str = "warning"
) -> Server:
    """Our app over the scripted engine with these bounds; by default without access
    lines (a thousand of them are not the measurement)."""
    settings = Settings(
        body_read_timeout_s=timeout_s,
        max_bodies_in_flight_per_client=per_client,
        log_level=log_level,
        data_dir=str(workdir / "data"),
    )
    port = free_port()
    env = {"PYTHONPATH": str(ROOT), "LILAC_SETTINGS_JSON": msgspec.json.encode(settings).decode()}
    server = Server(scripted_argv(port, "build"), workdir / "server.log", port=port, env=env)
    return server.wait_healthy(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--body-read-timeout-s", type=float, default=30.0)
    parser.add_argument("--per-client", type=int, default=64)
    parser.add_argument("--samples", type=int, default=50, help="second client's requests")
    parser.add_argument("--url", help="a running server (default: start a scripted one)")
    args = parser.parse_args(argv)
    if args.url:
        result = run(args.url, args.connections, args.body_read_timeout_s, args.samples)
    else:
        with tempfile.TemporaryDirectory(prefix="slow-bodies-") as workdir:
            server = scripted_server(Path(workdir), args.body_read_timeout_s, args.per_client)
            try:
                result = run(
                    server.base_url, args.connections, args.body_read_timeout_s, args.samples
                )
            finally:
                server.kill_all()
    result["settings"] = {
        "body_read_timeout_s": args.body_read_timeout_s,
        "max_bodies_in_flight_per_client": args.per_client,
        "connections": args.connections,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0
