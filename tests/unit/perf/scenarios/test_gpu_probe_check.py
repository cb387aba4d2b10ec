"""The GPU probe check's sampling and analysis, over a fake NVML and a fake owner on a
fake clock (the real run needs a GPU: `python3 -m perf gpu-probe-check` there)."""

from __future__ import annotations

import subprocess
import sys

from engine.admission.probes import MIB, NvmlProbe
from perf.scenarios.gpu_probe_check import (
    COMPUTE,
    GONE,
    IDLE,
    MEMORY,
    Reading,
    analyse,
    render,
    sample_loop,
)
from tests.unit.engine.admission.test_probes import FakeDevice, FakeNvml, proc, util

US, OWNER = 100, 555
PHASES = [(1.0, COMPUTE), (11.0, IDLE), (21.0, MEMORY)]
EXIT_AT = 31.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeOwner:
    """Drives the fake device as the PyTorch owner would drive the real one."""

    def __init__(self, clock: FakeClock, device: FakeDevice, owner_util: int = 95) -> None:
        self.clock, self.device, self.owner_util = clock, device, owner_util
        self.sent: set[str] = set()

    def _phase(self) -> str | None:
        current = None
        for at, name in PHASES:
            if self.clock.now >= at:
                current = name
        return current

    def markers(self) -> list[tuple[str, float]]:
        phase = self._phase()
        ours = proc(US, 2048)
        if not self.running():
            self.device.compute, self.device.process_util = [ours], []
        elif phase == COMPUTE:
            self.device.compute = [ours, proc(OWNER, 600)]
            self.device.process_util = [
                util(OWNER, self.owner_util, stamp=int(self.clock.now * 1e6))
            ]
        elif phase == IDLE:
            self.device.compute, self.device.process_util = [ours, proc(OWNER, 600)], []
        elif phase == MEMORY:
            self.device.compute, self.device.process_util = [ours, proc(OWNER, 8792)], []
        new = [(name, at) for at, name in PHASES if self.clock.now >= at and name not in self.sent]
        self.sent.update(name for name, _ in new)
        return new

    def running(self) -> bool:
        return self.clock.now < EXIT_AT

    def stop(self) -> None:
        pass


def run_check(ours: set[int], owner_util: int = 95):  # type: ignore[no-untyped-def]  # test helper
    clock = FakeClock()
    device = FakeDevice(compute=[proc(US, 2048)], process_util=[])
    probe = NvmlProbe(FakeNvml([device]), ours=lambda: ours)
    before = [Reading(clock(), probe.sample(), 0, "-") for _ in range(4)]  # type: ignore[arg-type]
    owner = FakeOwner(clock, device, owner_util)
    readings, markers = sample_loop(
        probe.sample, owner, interval_s=0.25, tail_s=5.0, clock=clock, sleep=clock.sleep
    )
    return analyse(before, readings, markers, 2048.0)


def test_every_phase_is_detected_within_one_interval() -> None:
    report = run_check({US})
    assert [p.phase for p in report.phases] == [COMPUTE, IDLE, MEMORY, GONE]
    assert [p.expected for p in report.phases] == ["active", "idle", "active", "idle"]
    for phase in report.phases:
        assert phase.probe_s is not None and phase.probe_s <= 0.25, phase
    assert report.own_memory_not_counted
    assert report.passed
    assert "PASSED" in render(report)


def test_the_state_machine_yields_to_the_owner_and_comes_back() -> None:
    phases = {p.phase: p for p in run_check({US}).phases}
    # The owner's compute drains and yields at once (nothing in flight).
    assert phases[COMPUTE].state == "yielded" and phases[COMPUTE].transition_s is not None
    # Idle for 10 s > resume_after_s: serving again before the memory-only owner.
    assert phases[IDLE].state == "serving"
    assert phases[MEMORY].state == "yielded"
    assert phases[GONE].state == "serving"


def test_our_own_memory_counted_as_the_owners_fails_the_check() -> None:
    report = run_check(set())  # a probe that does not know this process is ours
    assert report.foreign_memory_before_owner_mib == 2048.0
    assert not report.own_memory_not_counted
    assert not report.passed
    assert "COUNTED" in render(report)


def test_an_owner_the_probe_misses_fails_the_check() -> None:
    report = run_check({US}, owner_util=3)  # compute below every threshold
    compute = next(p for p in report.phases if p.phase == COMPUTE)
    assert compute.probe_s is None
    assert not report.passed
    assert "NOT DETECTED" in render(report)


def test_it_imports_neither_vllm_nor_the_web_stack_nor_torch_nor_psutil() -> None:
    code = (
        "import sys, perf.__main__, perf.scenarios.gpu_probe_check;"
        "heavy = {'vllm', 'litestar', 'msgspec', 'granian', 'torch', 'psutil', 'transformers'};"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fake_device_memory_is_in_mib() -> None:
    assert proc(OWNER, 1).usedGpuMemory == MIB
