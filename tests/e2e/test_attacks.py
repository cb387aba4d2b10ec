"""The attack matrix, short: a real server with `--auth keys` (the session's
`keys_server`), one key flooding while another sends a short request about once a
second (perf/scenarios/attacks.py; `make attacks` runs it long). Whatever the attacker
sends (deferred work included: background responses, batches, count_tokens), the victim
is never refused and the engine ends clean; the victim's TTFT is split
into admission's wait (its access lines), the engine's wait and step times (the fair
scheduler's, on /admin/fairness) and the rest."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from perf.scenarios.attacks import Pace, Row, Target, alone, attacks, run_attack, target_on
from tests.e2e.conftest import ADMIN_KEY, KeysServer

pytestmark = pytest.mark.e2e
# A few victim requests a row, none started after 4 s (under `rag` on this CPU, one
# victim request takes longer than that: it sends one).
PACE = Pace(requests=4, interval_s=1.0, seconds=4.0)


@pytest.fixture(scope="module")
def target(keys_server: KeysServer) -> Target:
    """The session's keys server, and the attacker's and the victim's keys on it."""
    return target_on(keys_server.server, ADMIN_KEY)


@pytest.fixture(scope="module")
def baseline(target: Target) -> Row:
    return asyncio.run(alone(target, PACE))


def test_the_victim_alone(baseline: Row) -> None:
    assert baseline.victim_refusals == 0, baseline.victim_errors
    assert baseline.victim_requests == 4 and baseline.unfinished_after == 0
    p50, p95, p99 = baseline.ttft_p50_ms, baseline.ttft_p95_ms, baseline.ttft_p99_ms
    assert p50 is not None and p95 is not None and p99 is not None
    assert p50 <= p95 <= p99 and baseline.ttft_mean_ms is not None
    # Every request of the victim's had its admission wait logged (alone: short).
    assert baseline.admission_wait_ms is not None and baseline.admission_wait_ms < 1000
    # The fair scheduler (on by default) published the victim's engine wait and steps.
    assert baseline.engine_wait_ms is not None and baseline.engine_steps is not None
    assert baseline.engine_steps["count"] > 0 and baseline.engine_steps["p95_ms"] > 0
    assert baseline.rest_ms is not None
    assert baseline.goal_met is None  # nothing to judge alone against


# `long_prompts` is left to the script: on this CPU its prefills alone take over a minute
# to drain, and the queue rules it exercises are the same as `prompts64`'s.
ATTACKS = ["rag", "prompts64", "streams256", "largest", "bad_requests"]
DEFERRED = ["background", "batches", "count_tokens"]
HOLDING = ["uploads", "half_bodies", "followers"]


@pytest.mark.parametrize("name", ATTACKS + DEFERRED + HOLDING)
def test_an_attack_never_refuses_the_victim(target: Target, baseline: Row, name: str) -> None:
    row = asyncio.run(run_attack(target, attacks(target)[name], PACE, baseline))
    assert row.victim_refusals == 0, row.victim_errors
    assert row.ttft_p50_ms is not None  # the victim's requests were answered
    assert 1 <= row.victim_requests <= PACE.requests
    assert sum(row.attacker.values()) + row.attacker_cut > 0  # the attacker did send
    if name == "bad_requests":
        assert all(status.startswith(("400", "404")) for status in row.attacker), row.attacker
    assert row.unfinished_after == 0  # nothing left running in the engine
    # Judged against alone: the ratios and the goal, and the split of the mean TTFT.
    assert row.p50_vs_alone is not None and row.p95_vs_alone is not None
    assert row.goal_met is not None and row.admission_wait_ms is not None
    if name == "rag":
        # The engine was busy with the attacker's prefills: its steps were published, and
        # the victim's engine wait with them, whether or not it stayed within one step.
        assert row.engine_steps is not None and row.engine_steps["count"] > 0
        assert row.engine_wait_ms is not None and row.engine_wait_within_step is not None
    # No attack gets a 500: a database kept busy past its wait is a 503 to retry.
    assert not any(status.startswith("500") for status in row.attacker), row.attacker
    if name == "background":
        assert "200" in row.attacker, row.attacker
        assert set(row.attacker) <= {"200", "503 database_unavailable"}, row.attacker
    if name == "batches":  # at most --max-live-batches live; the rest refused
        assert "200" in row.attacker, row.attacker
        assert set(row.attacker) <= {"200", "429 too_many_batches"}, row.attacker
    if name == "count_tokens":  # refused by the byte bound, before any tokenizing
        assert set(row.attacker) == {"400"} and row.attacker_tickets == 0, row.attacker
    if name in DEFERRED + HOLDING:
        assert row.memory_before_mb is not None and row.memory_after_mb is not None
        assert row.disk_before_mb is not None and row.disk_after_mb is not None
    if name == "uploads":  # stored up to the key's quota, within its requests a minute
        assert "200" in row.attacker, row.attacker
        allowed = {"200", "413 storage_quota_exceeded", "429 rate_limit_exceeded"}
        assert set(row.attacker) <= allowed, row.attacker
    if name == "half_bodies":  # held until the read timeout, past the bound refused
        assert "0 held" in row.attacker, row.attacker
        allowed = {"0 held", "429 too_many_bodies_in_flight", "408 request_timeout"}
        assert set(row.attacker) <= allowed, row.attacker
    if name == "followers":  # at most --max-followers-per-key open at once
        assert "200" in row.attacker and "429 too_many_followers" in row.attacker, row.attacker
        assert set(row.attacker) <= {"200", "429 too_many_followers"}, row.attacker
    assert httpx.get(f"{target.url}/health", timeout=10).status_code == 200
