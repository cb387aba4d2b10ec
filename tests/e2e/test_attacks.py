"""The attack matrix, short: a real server with `--auth keys` (the session's
`keys_server`), one key flooding while another sends one request a second
(perf/scenarios/attacks.py; `make attacks` runs it long). Whatever the attacker sends,
the victim is never refused and the engine ends clean."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from perf.scenarios.attacks import Target, alone, attacks, run_attack, target_on
from tests.e2e.conftest import ADMIN_KEY, KeysServer

pytestmark = pytest.mark.e2e
SECONDS = 4.0


@pytest.fixture(scope="module")
def target(keys_server: KeysServer) -> Target:
    """The session's keys server, and the attacker's and the victim's keys on it."""
    return target_on(keys_server.server, ADMIN_KEY)


def test_the_victim_alone(target: Target) -> None:
    row = asyncio.run(alone(target, SECONDS))
    assert row.victim_refusals == 0, row.victim_errors
    assert row.ttft_p50_ms is not None and row.unfinished_after == 0


# `long_prompts` is left to the script: on this CPU its prefills alone take over a minute
# to drain, and the queue rules it exercises are the same as `prompts64`'s.
@pytest.mark.parametrize("name", ["prompts64", "streams256", "largest", "bad_requests"])
def test_an_attack_never_refuses_the_victim(target: Target, name: str) -> None:
    row = asyncio.run(run_attack(target, attacks(target)[name], SECONDS))
    assert row.victim_refusals == 0, row.victim_errors
    assert row.ttft_p50_ms is not None  # the victim's requests were answered
    assert sum(row.attacker.values()) + row.attacker_cut > 0  # the attacker did send
    if name == "bad_requests":
        assert all(status.startswith(("400", "404")) for status in row.attacker), row.attacker
    assert row.unfinished_after == 0  # nothing left running in the engine
    assert httpx.get(f"{target.url}/health", timeout=10).status_code == 200
