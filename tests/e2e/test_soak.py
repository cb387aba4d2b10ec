"""A short soak of the session's real server: mixed traffic (valid, bad, abandoned at
random points, a burst) with the GPU's owner reclaiming it mid-load. No failure a fault
does not explain, and the engine empty at the end (perf/soak/run.py is the harness; `make
soak` runs the long version with SIGTERM and an engine-core kill)."""

from __future__ import annotations

from perf.harness.servers import Server
from perf.soak.run import SHORT_PLAN, ServerSlot, SoakConfig, run_soak


async def test_short_soak_with_an_owner_reclaim(server: Server) -> None:
    config = SoakConfig(
        plan=SHORT_PLAN, concurrency=3, max_tokens=8, max_requests=400, max_wall_s=80
    )
    report = await run_soak(ServerSlot(server, restart=None), config)
    print(report.render())
    assert report.unexplained_failures == []
    assert report.bad_inputs_without_4xx == []
    assert report.unfinished_engine_requests_at_end == 0
    assert [fault["name"] for fault in report.faults] == ["reclaim 3"]
    assert report.faults[0]["server_stopped_admitting"]
    assert report.outcomes.get("stream completed", 0) > 0
    assert report.outcomes.get("status 200", 0) > 0
    # The burst's answers are outcomes (a 429 among them is reported, not assumed away).
    assert sum(sum(k.values()) for kind, k in report.outcomes_by_kind.items() if "burst" in kind)
    assert report.outcomes.get("abandoned", 0) > 0
    assert report.event_loop_lag_p99_s is not None  # the server exports its loop lag
    assert report.memory[0]["growth_mib"] is not None
