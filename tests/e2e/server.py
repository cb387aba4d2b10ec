"""A real server, started the way `make serve` starts it, on a free local port.

Shared by the e2e fixtures and the soak harness (perf/soak.py). The server runs with
the scripted GPU probe on a timeline file it follows (`RunningServer.reclaim_gpu`
replaces the file to make the owner come back) and short admission timings, so a
reclaim plays out in seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

STARTUP_TIMEOUT_S = 600  # a loaded 2-core machine has taken over 5 minutes
IDLE_OWNER = "0 0\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningServer:
    def __init__(
        self, process: subprocess.Popen[bytes], base_url: str, log_path: Path, timeline: Path
    ) -> None:
        self.process = process
        self.base_url = base_url
        self.log_path = log_path
        self.timeline = timeline

    def metrics_text(self) -> str:
        return httpx.get(f"{self.base_url}/metrics", timeout=10).text

    def unfinished_requests(self) -> float:
        for line in self.metrics_text().splitlines():
            if line.startswith("lilac_engine_unfinished_requests "):
                return float(line.split()[1])
        raise AssertionError("metric lilac_engine_unfinished_requests missing")

    def reclaim_gpu(self, busy_s: float, util_pct: float = 100.0) -> None:
        """The owner takes the GPU back now, for `busy_s` seconds (the scripted probe
        follows its timeline file; a new file plays from when the probe sees it)."""
        write_timeline(self.timeline, f"0 {util_pct}\n{busy_s} 0\n")

    def processes(self) -> list[psutil.Process]:
        """The server process and all its descendants (granian worker, engine core)."""
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def engine_core(self) -> psutil.Process | None:
        """vLLM's engine core process (titled `VLLM::EngineCore`)."""
        for process in self.processes()[1:]:
            try:
                if process.name().startswith("VLLM") or "EngineCore" in process.name():
                    return process
            except psutil.NoSuchProcess:
                continue
        return None

    def rss_bytes(self) -> int:
        total = 0
        for process in self.processes():
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    def kill_all(self) -> None:
        """SIGKILL the server and every descendant it still has (ours only)."""
        for process in reversed(self.processes()):
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                continue
        self.process.wait(timeout=30)


def write_timeline(path: Path, text: str) -> None:
    """Replace the file at once (the probe never reads half of it)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def start_server(
    workdir: Path,
    timeout_s: float = STARTUP_TIMEOUT_S,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> RunningServer:
    """`lilac-serve serve` with the default model, its log and timeline in `workdir`;
    returns once /health answers 200."""
    port = free_port()
    log_path = workdir / "server.log"
    timeline = workdir / "owner.timeline"
    write_timeline(timeline, IDLE_OWNER)
    command = [
        str(Path(sys.executable).with_name("lilac-serve")),
        "serve",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--cpu-kvcache-space-gib",
        "1",
        "--gpu-probe",
        f"scripted:{timeline}",
        "--probe-interval",
        "0.2",
        "--grace-period",
        "2",
        "--resume-after",
        "1",
        # What it stores (responses) stays in its folder, not the user's data directory.
        "--data-dir",
        str(workdir / "data"),
        *extra_args,
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path, timeline)
    wait_healthy(server, timeout_s)
    return server


def wait_healthy(server: RunningServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.poll() is not None:
            raise AssertionError(f"server exited early:\n{server.log_path.read_text()[-4000:]}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.kill_all()
            log_tail = server.log_path.read_text()[-4000:]
            raise AssertionError(f"server not ready in time:\n{log_tail}")
        time.sleep(0.5)
