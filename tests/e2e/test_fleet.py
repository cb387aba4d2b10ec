"""Two lilac-serve replicas behind a real sglang-router, under load from real clients;
one replica's owner comes back mid-load (its scripted probe's timeline is rewritten).
The router must stop sending it work within a few health polls, no client request may
fail (the router retries the 503s the replica answers meanwhile), and the replica must
take traffic again once its owner is idle.

The replicas run the scripted engine so that this fits in the test suite; `make
fleet-demo` runs the same on the default model (perf/scenarios/fleet.py)."""

from __future__ import annotations

from pathlib import Path

from perf.harness.servers import free_port
from perf.scenarios.fleet import FleetConfig, run

HEALTH_INTERVAL_S = 1.0  # perf.scenarios.fleet.ROUTER_FLAGS
FAILURE_THRESHOLD = 2
BREAKER_TIMEOUT_S = 5.0  # a circuit breaker opened by B's 503s may hold it out this long


def test_router_moves_traffic_off_a_reclaimed_replica_and_back(tmp_path: Path) -> None:
    config = FleetConfig(
        scripted=True,
        load_s=18.0,
        reclaim_at_s=5.0,
        owner_active_s=4.0,
        concurrency=4,
        max_tokens=4,
        router_port=free_port(),
        router_metrics_port=free_port(),
        replica_ports=(free_port(), free_port()),
        workdir=tmp_path,
    )
    report = run(config)
    print("\n".join(report.lines()))
    assert report.requests > 40
    assert report.failures == 0, report.failure_statuses
    assert report.unready_at_s is not None, "replica B's /health never turned 503"
    stop = report.stop_routing_s
    assert stop is not None and stop <= HEALTH_INTERVAL_S * (FAILURE_THRESHOLD + 2)
    # While B was out, A served everything: some bucket has B at 0 and A busy.
    assert any(a > 0 and b == 0 for _, a, b in report.per_replica_per_bucket)
    assert report.rejoin_s is not None, "replica B took no traffic after its owner left"
    assert report.rejoin_s <= HEALTH_INTERVAL_S * 3 + BREAKER_TIMEOUT_S
    _, _, last_b = report.per_replica_per_bucket[-2]
    assert last_b > 0, "B idle at the end"
