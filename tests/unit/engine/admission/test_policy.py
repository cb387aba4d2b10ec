"""The admission state machine on injected time, driven by a scripted owner timeline."""

import pytest

from engine.admission.policy import Owner, Policy, State, StateMachine, classify
from engine.admission.probes import GpuSample, ScriptedProbe, Segment

POLICY = Policy(grace_s=30.0, resume_after_s=60.0)


def test_classify_thresholds() -> None:
    assert classify(GpuSample(0.0, 0.0), POLICY) is Owner.IDLE
    assert classify(GpuSample(4.9, 0.0), POLICY) is Owner.IDLE
    assert classify(GpuSample(5.0, 0.0), POLICY) is Owner.LIGHT
    assert classify(GpuSample(20.0, 0.0), POLICY) is Owner.ACTIVE
    # Memory alone is enough: an owner loading a model has not started computing yet.
    assert classify(GpuSample(0.0, 1024.0), POLICY) is Owner.ACTIVE


def test_owner_reclaims_then_returns_with_hysteresis() -> None:
    machine = StateMachine(POLICY, now=0.0)
    assert machine.update(10.0, Owner.IDLE, True, in_flight=3) == []
    [drain] = machine.update(11.0, Owner.ACTIVE, True, in_flight=3)
    assert (drain.source, drain.target, drain.reason) == (
        State.SERVING,
        State.DRAINING,
        "owner active",
    )
    # In-flight requests keep the drain open until the grace period ends.
    assert machine.tick(40.9, in_flight=3) == []
    [yielded] = machine.tick(41.0, in_flight=3)
    assert yielded.target is State.YIELDED
    assert "grace period over" in yielded.reason
    # The owner leaves at 100; we come back only after 60 s of quiet.
    machine.update(100.0, Owner.IDLE, True, in_flight=0)
    assert machine.update(159.9, Owner.IDLE, True, in_flight=0) == []
    [back] = machine.update(160.0, Owner.IDLE, True, in_flight=0)
    assert (back.source, back.target) == (State.YIELDED, State.SERVING)


def test_drain_ends_early_when_the_last_request_leaves() -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.update(1.0, Owner.ACTIVE, True, in_flight=1)
    [yielded] = machine.tick(2.5, in_flight=0)
    assert (yielded.target, yielded.at) == (State.YIELDED, 2.5)


def test_nothing_in_flight_goes_straight_to_yielded() -> None:
    machine = StateMachine(POLICY, now=0.0)
    steps = machine.update(1.0, Owner.ACTIVE, True, in_flight=0)
    assert [t.target for t in steps] == [State.DRAINING, State.YIELDED]


def test_a_flapping_owner_restarts_the_hysteresis() -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.update(1.0, Owner.ACTIVE, True, in_flight=0)
    machine.update(10.0, Owner.IDLE, True, in_flight=0)
    machine.update(50.0, Owner.ACTIVE, True, in_flight=0)  # back before 60 s of quiet
    machine.update(51.0, Owner.IDLE, True, in_flight=0)
    assert machine.update(70.0, Owner.IDLE, True, in_flight=0) == []  # 60 s from 10 would pass
    assert machine.state is State.YIELDED
    [back] = machine.update(111.0, Owner.IDLE, True, in_flight=0)
    assert back.target is State.SERVING


def test_light_activity_throttles_and_returns_after_idle() -> None:
    machine = StateMachine(POLICY, now=0.0)
    [throttle] = machine.update(5.0, Owner.LIGHT, True, in_flight=2)
    assert throttle.target is State.THROTTLED
    assert POLICY.cap(State.THROTTLED) == 2 < POLICY.cap(State.SERVING)
    machine.update(10.0, Owner.IDLE, True, in_flight=2)
    assert machine.update(69.0, Owner.IDLE, True, in_flight=2) == []
    [serve] = machine.update(70.0, Owner.IDLE, True, in_flight=2)
    assert serve.target is State.SERVING
    [drain] = machine.update(80.0, Owner.ACTIVE, True, in_flight=2)
    assert drain.target is State.DRAINING


def test_return_under_light_activity_is_throttled() -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.update(1.0, Owner.ACTIVE, True, in_flight=0)
    machine.update(2.0, Owner.LIGHT, True, in_flight=0)
    [back] = machine.update(62.0, Owner.LIGHT, True, in_flight=0)
    assert back.target is State.THROTTLED


def test_closed_window_drains_and_reopening_returns() -> None:
    machine = StateMachine(POLICY, now=0.0)
    [drain] = machine.update(1.0, Owner.IDLE, False, in_flight=1)
    assert (drain.target, drain.reason) == (State.DRAINING, "lending window closed")
    machine.tick(2.0, in_flight=0)
    machine.update(3.0, Owner.IDLE, True, in_flight=0)
    assert machine.update(62.9, Owner.IDLE, True, in_flight=0) == []
    assert machine.update(63.0, Owner.IDLE, True, in_flight=0)[0].target is State.SERVING


def test_operator_drain_holds_until_resume_which_skips_hysteresis() -> None:
    machine = StateMachine(POLICY, now=0.0)
    steps = machine.drain(5.0, in_flight=0)
    assert [t.target for t in steps] == [State.DRAINING, State.YIELDED]
    assert machine.update(500.0, Owner.IDLE, True, in_flight=0) == []
    [back] = machine.resume(501.0, in_flight=0)
    assert back.target is State.SERVING


def test_operator_resume_does_not_override_an_active_owner() -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.drain(5.0, in_flight=0)
    machine.update(6.0, Owner.ACTIVE, True, in_flight=0)
    assert machine.resume(7.0, in_flight=0) == []
    assert machine.state is State.YIELDED


def test_resume_during_a_drain_keeps_the_requests_running() -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.drain(5.0, in_flight=4)
    [back] = machine.resume(6.0, in_flight=4)
    assert (back.source, back.target) == (State.DRAINING, State.SERVING)


def test_stop_drains_and_never_comes_back() -> None:
    machine = StateMachine(POLICY, now=0.0)
    [drain] = machine.stop(1.0, in_flight=2)
    assert drain.reason == "server stopping"
    assert machine.tick(31.0, in_flight=2)[0].target is State.YIELDED
    assert machine.update(10_000.0, Owner.IDLE, True, in_flight=0) == []
    assert machine.resume(10_001.0, in_flight=0) == []


@pytest.mark.parametrize(("now", "expected"), [(11.0, 90.0), (35.0, 66.0), (41.0, 60.0)])
def test_retry_after_covers_the_rest_of_the_drain_and_the_hysteresis(
    now: float, expected: float
) -> None:
    machine = StateMachine(POLICY, now=0.0)
    machine.update(11.0, Owner.ACTIVE, True, in_flight=1)
    machine.tick(now, in_flight=1)
    assert machine.retry_after_s(now) == pytest.approx(expected)


def test_scripted_timeline_drives_a_whole_cycle() -> None:
    """Owner idle, active from 100 s to 400 s, then idle: serve, drain, yield, return."""
    clock = [0.0]
    probe = ScriptedProbe(
        [Segment(100.0, GpuSample(80.0, 4096.0, 1)), Segment(400.0, GpuSample())],
        clock=lambda: clock[0],
    )
    machine = StateMachine(POLICY, now=0.0)
    seen: list[tuple[float, State]] = []
    for second in range(0, 600):
        clock[0] = float(second)
        in_flight = 2 if second < 110 else 0  # the last requests finish at 110 s
        owner = classify(probe.sample(), POLICY)
        for transition in machine.update(clock[0], owner, True, in_flight):
            seen.append((transition.at, transition.target))
    assert seen == [
        (100.0, State.DRAINING),
        (110.0, State.YIELDED),
        (460.0, State.SERVING),
    ]
