"""Server subprocesses for the load runs: start, wait until healthy, find the HTTP process,
read its CPU time, stop everything that was started (and only that)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psutil


class Server:
    """A server subprocess in its own process group, with its output in a log file."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.argv = list(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.log_path = log_path
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def wait_healthy(self, url: str, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); see {self.log_path}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{url} not healthy after {timeout_s:.0f}s; see {self.log_path}")

    def http_process(self, granian: bool) -> psutil.Process:
        """The process that serves HTTP. Under granian its worker process (which embeds
        the AsyncLLM frontend), not granian's main process nor vLLM's engine processes;
        for `vllm serve` the API-server process itself."""
        root = psutil.Process(self.proc.pid)
        if not granian:
            return root
        for child in root.children():
            cmdline = " ".join(child.cmdline())
            if "granian" in cmdline and "worker" in cmdline:
                return child
        raise RuntimeError(f"no granian worker under pid {root.pid}")

    def engine_processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.proc.pid)
        return [p for p in root.children(recursive=True) if p.name().startswith("VLLM")]

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM the process group we created, then SIGKILL whatever is left of it."""
        if self.proc.poll() is None:
            try:
                descendants = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                descendants = []
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            _, alive = psutil.wait_procs(descendants, timeout=10)
            for process in alive:
                process.kill()
        self._log.close()


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU time of the process itself (all its threads, not its children)."""
    times = process.cpu_times()
    return times.user + times.system
