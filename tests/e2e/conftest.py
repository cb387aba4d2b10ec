"""A real server, started the way `make serve` starts it, on a free local port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

STARTUP_TIMEOUT_S = 600  # an engine start takes minutes on a loaded CPU machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningServer:
    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
        self.process = process
        self.base_url = base_url
        self.log_path = log_path

    def unfinished_requests(self) -> float:
        text = httpx.get(f"{self.base_url}/metrics").text
        for line in text.splitlines():
            if line.startswith("lilac_engine_unfinished_requests "):
                return float(line.split()[1])
        raise AssertionError("metric lilac_engine_unfinished_requests missing")


def kill_tree(pid: int) -> None:
    """Kill a server and what it started (granian's worker, vLLM's engine core): killing
    granian's main process alone leaves them running."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for process in [*root.children(recursive=True), root]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def start_server(log_path: Path, *extra: str) -> RunningServer:
    """`lilac-serve serve` on a free port with the small test engine, once it is healthy."""
    port = free_port()
    command = [
        str(Path(sys.executable).with_name("lilac-serve")),
        "serve",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--cpu-kvcache-space-gib",
        "1",
        *extra,
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise AssertionError(f"server exited early:\n{log_path.read_text()[-4000:]}")
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            kill_tree(process.pid)
            raise AssertionError(f"server not ready in time:\n{log_path.read_text()[-4000:]}")
        time.sleep(1)
    return RunningServer(process, base_url, log_path)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(log_path)
    process = running.process
    yield running
    # A clean stop on SIGTERM is part of the contract: exit 0, engine core gone with it.
    assert process.poll() is None, "server died during the tests"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log_path.read_text()[-4000:]
