"""The day simulation: a short run that checks its bookkeeping and the policy trade-offs."""

from dataclasses import replace

from engine.admission.policy import Policy
from engine.admission.probes import GpuSample, Segment
from perf.scenarios.admission_sim import Workload, owner_day, simulate

# Owner active from 10 min to 20 min of a 40-minute run.
OWNER = [Segment(0.0, GpuSample()), Segment(600.0, GpuSample(90.0)), Segment(1200.0, GpuSample())]
WORK = Workload(rate_per_s=0.5, output_tokens=(400, 800))
BASE = Policy(grace_s=30.0, resume_after_s=60.0, max_concurrent=32)


def run(policy: Policy):  # type: ignore[no-untyped-def]
    return simulate(policy, OWNER, WORK, seed=3, duration_s=2400.0)


def test_bookkeeping_adds_up() -> None:
    result = run(BASE)
    assert result.yields == 1
    assert result.offered > 1000
    assert result.completed + result.drained + result.rejected <= result.offered
    # Roughly 10 min yielded plus the hysteresis: the arrivals then are rejected.
    assert 0.2 < result.rejected / result.offered < 0.4
    # Lent everything but the owner's 10 minutes and the minute of hysteresis.
    assert 1735 <= result.lent_s <= 1745  # 2400 s - 600 s owner - 60 s hysteresis


def test_interference_is_bounded_by_grace_plus_probe_interval() -> None:
    result = run(BASE)
    assert 0 < result.interference_s <= BASE.grace_s + BASE.probe_interval_s
    immediate = run(replace(BASE, grace_s=0.0))
    assert immediate.interference_s <= BASE.probe_interval_s + 0.5
    # Yielding at once ends requests that the grace period would have let finish.
    assert immediate.drained > result.drained


def test_longer_hysteresis_rejects_more() -> None:
    assert run(replace(BASE, resume_after_s=300.0)).rejected > run(BASE).rejected


def test_owner_day_is_reproducible_and_ordered() -> None:
    day = owner_day(7)
    assert day == owner_day(7)
    starts = [s.start_s for s in day]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert any(s.sample.foreign_util_pct >= 60 for s in day)


def test_a_flood_of_many_prompt_requests_refuses_nobody_else() -> None:
    """A client sending 64-prompt requests far faster than they can run, beside eight
    ordinary clients: the flood is refused, the others never are."""
    idle = [Segment(0.0, GpuSample())]
    work = replace(WORK, flood_rate_per_s=2.0)
    policy = replace(BASE, max_queued=256, queue_timeout_s=60.0)
    result = simulate(policy, idle, work, seed=3, duration_s=600.0)
    assert result.flood_refused > 10_000
    assert result.others_refused == 0
    assert result.refused_with_nothing_queued == 0
    assert result.completed > 0


def test_batch_lines_fill_spare_capacity_without_touching_interactive_requests() -> None:
    from perf.scenarios.admission_sim import BatchDemand

    demand = BatchDemand(batches=((0.0, 5000),), output_tokens=(100, 200))
    alone, beside = run(BASE), simulate(BASE, OWNER, WORK, seed=3, duration_s=2400.0, batch=demand)
    # The interactive requests are served exactly as without batches.
    for name in ("completed", "rejected", "served_tokens", "drained", "yields"):
        assert getattr(beside, name) == getattr(alone, name), name
    assert beside.batch_lines > 0 and beside.batch_tokens > 0
    # The owner's reclaim cut the lines running then; they ran again, none was lost.
    assert beside.batch_cut > 0
    assert beside.batch_lines + beside.batch_left == 5000
    # Only while lent: no more interference than the interactive requests cause.
    assert beside.interference_s <= BASE.grace_s + BASE.probe_interval_s + 0.5
