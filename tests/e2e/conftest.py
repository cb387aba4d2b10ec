"""Real servers, started the way `make serve` starts them, on free local ports, each one
for the whole e2e folder (see perf/harness/servers.py): `server` (`--auth none`) and
`keys_server` (`--auth keys` over a keys database of its own); `dying_server` is
`server` again, for the one test that kills it, which runs last of the folder. A real
engine takes a minute or more to start here: a module shares these rather than starting
its own. Those the selected tests use are launched together the first time one is
needed (`launched`): a start keeps about one core busy, and the machine has two."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from perf.harness.servers import LILAC, Server, launch_lilac

# The shared server runs with an admin key (from the environment, as docs/admission.md says to
# give it) and one allowed web origin, for the cross-site tests.
ADMIN_KEY = "e2e-admin-key"
ALLOWED_ORIGIN = "http://app.example"


# The documentation's examples run first of the folder: the tenants page launches a keys
# server of its own as soon as its first block has made the key, so that start overlaps
# the shared servers' (`launched`, which the page's next block waits for) instead of
# being waited for on its own halfway through the folder.
FIRST = Path(__file__).parent / "test_docs_examples.py"


# The test that kills its server (`dying_server`) runs last of the folder: the server it
# kills is the shared `server`, which no test needs after it.
LAST_FIXTURE = "dying_server"


def _is_last(item: pytest.Item) -> bool:
    return LAST_FIXTURE in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = FIRST.parent
    ours = [i for i, item in enumerate(items) if here in item.path.parents]
    if not ours:
        return
    start, end = ours[0], ours[-1] + 1
    folder = items[start:end]
    first = [item for item in folder if item.path == FIRST]
    last = [item for item in folder if item.path != FIRST and _is_last(item)]
    middle = [item for item in folder if item.path != FIRST and not _is_last(item)]
    items[start:end] = first + middle + last


def _launch_server(workdir: Path) -> Server:
    return launch_lilac(
        workdir,
        # Its own data directory: what it stores (responses) is this session's alone.
        extra_args=("--allowed-origins", ALLOWED_ORIGIN, "--data-dir", str(workdir / "data")),
        extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
    )


# The pids of the shared servers `dying_server` handed to its test to kill.
KILLED = pytest.StashKey[set[int]]()


@pytest.fixture(scope="package")
def server(request: pytest.FixtureRequest, launched: Launched) -> Iterator[Server]:
    running = launched.take("server", request)
    yield running
    process = running.process
    if process.pid in request.session.stash.get(KILLED, set()):
        return  # killed by the engine-death test, which checked how it went
    # A clean stop on SIGTERM is part of the contract: exit 0, and every process of the
    # server (the granian worker, the engine's own process, vLLM's engine core) gone.
    assert process.poll() is None, "server died during the tests"
    everything = running.processes()[1:]
    assert everything, "the server has no worker to stop"
    logged_before_stop = running.log_path.stat().st_size
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, running.log_path.read_text()[-4000:]
    with running.log_path.open("rb") as log:
        log.seek(logged_before_stop)
        stop_log = log.read().decode(errors="replace")
    assert "Traceback" not in stop_log, stop_log[-4000:]
    deadline = time.monotonic() + 30
    while any(_lives(p) for p in everything):
        assert time.monotonic() < deadline, f"a process outlived the server: {everything}"
        time.sleep(0.2)


def _lives(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# The shared `server` compiles the grammar warm-up at start as `make serve` does (its tests
# send tool calls and schemas; tests/docs runs the documentation against it); no test of
# the keys server sends a grammar, so it skips it (seconds of CPU a start, on the two
# cores that the servers start on together).
NO_GRAMMAR_WARMUP = ("--grammar-warmup", "false")

# The keys server runs without vLLM's stat logger (tests/e2e/test_engine_metrics.py reads
# its /metrics beside the shared server's, which keeps it, as `make serve` does).
NO_ENGINE_METRICS = ("--engine-metrics", "false")

# The keys server's upload bounds (the tenants tests go past them) and batch lease (a
# killed replica's batch lines run again this long after its last renewal).
MAX_FILE_BYTES = 1_000_000
MAX_FILE_LINES = 100
BATCH_LEASE_S = 5


class KeysServer:
    """`lilac-serve serve --auth keys` (the scripted GPU probe, the admin key `ADMIN_KEY`)
    over its own data directory, shared by every module that needs keys: each test makes
    keys of its own (`new_key`, or `cli("keys", "create", ...)`) and reads back only
    its keys' rows, so tests stay independent.

    A test may kill -9 it (`kill()`); the next use of `server` starts it again on the
    same data directory (a restart, on another port). A server that died unasked fails
    the test that next uses it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.cli("keys", "create", "--name", "bootstrap")
        self._server: Server | None = None
        self.starts = 0

    def adopt(self, running: Server) -> None:
        """Serve through `running`, a server of `launch()`."""
        self._server = running

    def launch(self) -> Server:
        """Its server process, started (`wait_healthy` before use)."""
        self.starts += 1
        return launch_lilac(
            self.workdir,
            extra_args=(
                *("--auth", "keys", "--data-dir", str(self.data)),
                *("--max-file-bytes", str(MAX_FILE_BYTES)),
                *("--max-file-lines", str(MAX_FILE_LINES)),
                *("--batch-lease-s", str(BATCH_LEASE_S), "--replica-id", "e2e"),
                *NO_GRAMMAR_WARMUP,
                *NO_ENGINE_METRICS,
            ),
            extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
        )

    @property
    def server(self) -> Server:
        if self._server is None:
            self._server = self.launch().wait_healthy()
        code = self._server.process.poll()
        assert code is None, f"keys server died ({code}):\n{self._server.log_tail()}"
        return self._server

    @property
    def url(self) -> str:
        return self.server.base_url

    def kill(self) -> None:
        """kill -9 of the server, its worker and its engine core together."""
        if self._server is not None:
            self._server.kill_all()
            self._server = None

    def stop(self) -> None:
        """SIGTERM: the server drains and exits (0), every process of it (worker, the
        engine's own process, engine core) with it; the next use starts it again."""
        if self._server is not None:
            outlived = self._server.stop()
            assert self._server.process.returncode == 0, self._server.log_tail()
            assert not outlived, f"processes outlived the server: {outlived}"
            self._server = None

    def cli(self, *args: str) -> str:
        """`lilac-serve ARGS --data-dir DATA` (keys, usage): its standard output."""
        result = subprocess.run(
            [LILAC, *args, "--data-dir", str(self.data)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return result.stdout.strip()

    def new_key(self, name: str, **limits: Any) -> str:
        """A key made through the admin API (`rpm=None`: unlimited, `models=[...]`): its
        secret. Milliseconds, where `cli("keys", "create", ...)` starts a process that
        takes seconds; the CLI's own path has its tests."""
        response = httpx.post(
            f"{self.url}/admin/keys",
            json={"name": name, **limits},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    def client(self, key: str, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=retries)


@pytest.fixture(scope="package")
def keys_server(
    request: pytest.FixtureRequest, launched: Launched, keys_home: KeysServer
) -> Iterator[KeysServer]:
    keys_home.adopt(launched.take("keys_server", request))
    yield keys_home
    keys_home.kill()


@pytest.fixture(scope="package")
def keys_home(tmp_path_factory: pytest.TempPathFactory) -> KeysServer:
    """The keys server's data directory, its keys database made, its server not started."""
    return KeysServer(tmp_path_factory.mktemp("keys-server"))


@pytest.fixture
def dying_server(request: pytest.FixtureRequest, server: Server) -> Iterator[Server]:
    """The shared `server`, for one test to kill: that test runs last of the folder
    (`pytest_collection_modifyitems`), so a start is saved and no later test is left
    without a server. The clean SIGTERM stop that `server` checks at the end is then
    `test_batches.py`'s to check, on the keys server."""
    request.session.stash.setdefault(KILLED, set()).add(server.process.pid)
    yield server
    server.kill_all()


def _tmp(request: pytest.FixtureRequest, name: str) -> Path:
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    return factory.mktemp(name)


def _launch_keys_server(request: pytest.FixtureRequest) -> Server:
    keys: KeysServer = request.getfixturevalue("keys_home")
    return keys.launch()


# The servers fixtures take from `launched`: how each is launched, from the request of a
# fixture that is being set up.
LAUNCHERS: dict[str, Callable[[pytest.FixtureRequest], Server]] = {
    "server": lambda request: _launch_server(_tmp(request, "server")),
    "keys_server": _launch_keys_server,
}


class Launched:
    """The servers of `LAUNCHERS` that the selected tests use, launched together the
    first time one is needed and waited for together (so that no start competes with a
    test for the cores). A fixture takes its own; one not launched ahead (for a test
    that asks for its fixture by name at run time) starts when it is taken."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        here = Path(__file__).parent  # fixtures of the same names elsewhere are others
        used = {
            name
            for item in request.session.items
            if here in item.path.parents
            for name in getattr(item, "fixturenames", ())
        }
        self._running = {
            name: launch(request) for name, launch in LAUNCHERS.items() if name in used
        }
        try:
            for running in self._running.values():
                running.wait_healthy()
        except BaseException:
            self.kill_left()
            raise

    def take(self, name: str, request: pytest.FixtureRequest) -> Server:
        running = self._running.pop(name, None)
        return running or LAUNCHERS[name](request).wait_healthy()

    def kill_left(self) -> None:
        for running in self._running.values():
            running.kill_all()


@pytest.fixture(scope="package")
def launched(request: pytest.FixtureRequest) -> Iterator[Launched]:
    servers = Launched(request)
    yield servers
    servers.kill_left()
