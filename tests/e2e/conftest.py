"""Real servers, started the way `make serve` starts them, on free local ports, each one
for the whole session (see perf/harness/servers.py): `server` (`--auth none`) and
`keys_server` (`--auth keys` over a keys database of its own). A real engine takes a
minute or more to start here: a module shares these rather than starting its own."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from perf.harness.servers import LILAC, Server, start_lilac

# The shared server runs with an admin key (from the environment, as docs/admission.md says to
# give it) and one allowed web origin, for the cross-site tests.
ADMIN_KEY = "e2e-admin-key"
ALLOWED_ORIGIN = "http://app.example"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("server")
    running = start_lilac(
        workdir,
        # Its own data directory: what it stores (responses) is this session's alone.
        extra_args=("--allowed-origins", ALLOWED_ORIGIN, "--data-dir", str(workdir / "data")),
        extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
    )
    yield running
    # A clean stop on SIGTERM is part of the contract: exit 0, engine core gone with it.
    process = running.process
    assert process.poll() is None, "server died during the tests"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, running.log_path.read_text()[-4000:]


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

    def _start(self) -> Server:
        self.starts += 1
        return start_lilac(
            self.workdir,
            extra_args=(
                *("--auth", "keys", "--data-dir", str(self.data)),
                *("--max-file-bytes", str(MAX_FILE_BYTES)),
                *("--max-file-lines", str(MAX_FILE_LINES)),
                *("--batch-lease-s", str(BATCH_LEASE_S), "--replica-id", "e2e"),
            ),
            extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
        )

    @property
    def server(self) -> Server:
        if self._server is None:
            self._server = self._start()
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
        """SIGTERM: the server drains and exits (0); the next use starts it again."""
        if self._server is not None:
            self._server.stop()
            assert self._server.process.returncode == 0, self._server.log_tail()
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


@pytest.fixture(scope="session")
def keys_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeysServer]:
    running = KeysServer(tmp_path_factory.mktemp("keys-server"))
    running.server  # noqa: B018 - started here, so that its start counts as setup
    yield running
    running.kill()
