"""A real server, started the way `make serve` starts it, on a free local port; one for
the whole session (see perf/harness/servers.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from perf.harness.servers import Server, start_lilac

# The shared server runs with an admin key (from the environment, as docs/admission.md says to
# give it) and one allowed web origin, for the cross-site tests.
ADMIN_KEY = "e2e-admin-key"
ALLOWED_ORIGIN = "http://app.example"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_lilac(
        tmp_path_factory.mktemp("server"),
        extra_args=("--allowed-origins", ALLOWED_ORIGIN),
        extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
    )
    yield running
    # A clean stop on SIGTERM is part of the contract: exit 0, engine core gone with it.
    process = running.process
    assert process.poll() is None, "server died during the tests"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, running.log_path.read_text()[-4000:]
