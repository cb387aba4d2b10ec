"""The NVML probe and the admission state machine against a real GPU owner workload.

    python3 -m perf gpu-probe-check [--out gpu_probe.json] [--phase-s 20]

Runs on a GPU machine with only the standard library, nvidia-ml-py, PyTorch and this
repository (no vLLM, no web stack): `engine.admission.probes.NvmlProbe` samples the GPU
while an owner process (PyTorch, started here) goes through four phases: matrix
products, idle (alive, holding its CUDA context), memory only (a large tensor, no
kernels), gone. Meanwhile this process holds GPU memory of its own, which the probe
must not count as the owner's. Each sample is classified by `Policy` and fed to the
admission `StateMachine`. The report gives, per phase change, the time from the
owner's marker to the probe's verdict (`active` / `idle`) and to the state machine's
transition, and whether our own memory leaked into the owner's figures. Exit status 0
when every phase was detected and our memory was not counted, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.admission.policy import Owner, Policy, StateMachine, classify
from engine.admission.probes import GpuSample, NvmlProbe

# The owner's phases, in order; each marker is printed by the owner when it begins.
COMPUTE, IDLE, MEMORY, GONE = "compute", "idle", "memory", "gone"
EXPECTED = {COMPUTE: Owner.ACTIVE, IDLE: Owner.IDLE, MEMORY: Owner.ACTIVE, GONE: Owner.IDLE}
# A short hysteresis, so that the state machine's round trip fits in a phase.
CHECK_POLICY = Policy(grace_s=1.0, resume_after_s=3.0)


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic(), shared by every process on the machine
    sample: GpuSample
    owner: Owner
    state: str


@dataclass
class PhaseResult:
    phase: str
    began_at: float
    expected: str
    probe_s: float | None = None  # marker -> first reading classified as expected
    state: str | None = None  # the state machine's state at the phase's end
    transition_s: float | None = None  # marker -> the state machine's first transition

    @property
    def detected(self) -> bool:
        return self.probe_s is not None


@dataclass
class Report:
    phases: list[PhaseResult] = field(default_factory=list)
    own_memory_mib: float = 0.0
    foreign_memory_before_owner_mib: float = 0.0
    foreign_processes_before_owner: int = 0
    readings: int = 0

    @property
    def own_memory_not_counted(self) -> bool:
        return self.foreign_processes_before_owner == 0 and (
            self.foreign_memory_before_owner_mib < CHECK_POLICY.busy_memory_mib / 8
        )

    @property
    def passed(self) -> bool:
        complete = [p.phase for p in self.phases] == list(EXPECTED)
        return complete and all(p.detected for p in self.phases) and self.own_memory_not_counted


class OwnerProcess(Protocol):
    def markers(self) -> list[tuple[str, float]]: ...  # new (phase, monotonic time) pairs

    def running(self) -> bool: ...

    def stop(self) -> None: ...


# ---------------------------------------------------------------- sampling and analysis


def sample_loop(
    sample: Callable[[], GpuSample],
    owner: OwnerProcess,
    *,
    interval_s: float,
    tail_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float = 420.0,
) -> tuple[list[Reading], list[tuple[str, float]]]:
    """Sample until the owner has been gone for `tail_s`; feed the state machine."""
    started = clock()
    machine = StateMachine(CHECK_POLICY, started)
    readings: list[Reading] = []
    markers: list[tuple[str, float]] = []
    gone_at: float | None = None
    while clock() - started < timeout_s:
        markers += owner.markers()
        now = clock()
        current = sample()
        verdict = classify(current, CHECK_POLICY)
        machine.update(now, verdict, True, 0)
        readings.append(Reading(now, current, verdict, str(machine.state)))
        if gone_at is None and not owner.running():
            markers += owner.markers()
            gone_at = now
            markers.append((GONE, now))
        if gone_at is not None and now - gone_at >= tail_s:
            break
        sleep(interval_s)
    return readings, markers


def analyse(
    before: list[Reading],
    readings: list[Reading],
    markers: list[tuple[str, float]],
    own_memory_mib: float,
) -> Report:
    """`before`: readings taken while only this process held GPU memory (no owner yet);
    `readings` and `markers`: the owner's run."""
    report = Report(own_memory_mib=own_memory_mib, readings=len(readings))
    if before:
        report.foreign_memory_before_owner_mib = max(r.sample.foreign_memory_mib for r in before)
        report.foreign_processes_before_owner = max(r.sample.foreign_processes for r in before)
    bounds = [*[at for _, at in markers[1:]], float("inf")]
    for (phase, began), ends in zip(markers, bounds, strict=True):
        if phase not in EXPECTED:
            continue
        expected = EXPECTED[phase]
        result = PhaseResult(phase, began, expected.name.lower())
        during = [r for r in readings if began <= r.at < ends]
        hit = next((r for r in during if r.owner is expected), None)
        if hit is not None:
            result.probe_s = round(hit.at - began, 3)
        earlier = [r for r in readings if r.at < began]
        if during:
            result.state = during[-1].state
            start_state = earlier[-1].state if earlier else during[0].state
            change = next((r for r in during if r.state != start_state), None)
            if change is not None:
                result.transition_s = round(change.at - began, 3)
        report.phases.append(result)
    return report


def render(report: Report) -> str:
    lines = [
        "| owner phase | expected | probe: marker -> verdict | state at phase end "
        "| marker -> first state change |",
        "| --- | --- | ---: | --- | ---: |",
    ]
    for p in report.phases:
        probe = f"{p.probe_s:.2f} s" if p.probe_s is not None else "NOT DETECTED"
        change = f"{p.transition_s:.2f} s" if p.transition_s is not None else "-"
        lines.append(f"| {p.phase} | {p.expected} | {probe} | {p.state} | {change} |")
    lines.append(
        f"\nour own GPU memory: {report.own_memory_mib:.0f} MiB; counted as the owner's "
        f"before the owner started: {report.foreign_memory_before_owner_mib:.0f} MiB in "
        f"{report.foreign_processes_before_owner} process(es) -> "
        f"{'not counted (ok)' if report.own_memory_not_counted else 'COUNTED'}"
    )
    lines.append(f"readings: {report.readings}; check {'PASSED' if report.passed else 'FAILED'}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the real owner


OWNER_CODE = """
import sys, time, torch
phase_s, memory_gib = float(sys.argv[1]), float(sys.argv[2])
dev = torch.device("cuda")
a = torch.randn(8192, 8192, device=dev); b = torch.randn(8192, 8192, device=dev)
torch.cuda.synchronize()
def mark(name): print(name, time.monotonic(), flush=True)
mark("compute")
end = time.monotonic() + phase_s
while time.monotonic() < end:
    for _ in range(8): c = a @ b
    torch.cuda.synchronize()
del a, b, c; torch.cuda.empty_cache(); torch.cuda.synchronize()
mark("idle")
time.sleep(phase_s)
hold = torch.empty(int(memory_gib * 2**30), dtype=torch.uint8, device=dev)
hold.fill_(1); torch.cuda.synchronize()
mark("memory")
time.sleep(phase_s)
"""


class TorchOwner:
    """The owner workload in a child process; its markers come over stdout."""

    def __init__(self, phase_s: float, memory_gib: float) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", OWNER_CODE, str(phase_s), str(memory_gib)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)

    def markers(self) -> list[tuple[str, float]]:
        found = []
        for line in _lines(self._proc.stdout):
            name, at = line.split()
            found.append((name, float(at)))
        return found

    def running(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        if self.running():
            self._proc.kill()
        self._proc.wait()


def _lines(stream: Any) -> Iterable[str]:
    while True:
        line = stream.readline()
        if not line:
            return
        yield line.strip()


def hold_own_memory(gib: float) -> tuple[Any, float]:
    """GPU memory held by this (the probing) process: a CUDA context and a tensor."""
    import torch

    tensor = torch.ones(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    return tensor, gib * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON")
    parser.add_argument("--phase-s", type=float, default=20.0, help="seconds per owner phase")
    parser.add_argument("--interval-s", type=float, default=0.25, help="probe interval")
    parser.add_argument("--own-gib", type=float, default=2.0, help="memory this process holds")
    parser.add_argument("--owner-gib", type=float, default=8.0, help="the memory-only owner")
    args = parser.parse_args(argv)
    held, own_mib = hold_own_memory(args.own_gib)
    # Ours is this process alone: the owner is our child, but it stands for a stranger.
    probe = NvmlProbe(ours=lambda: {os.getpid()})
    before = []
    for _ in range(8):  # before the owner exists: only our own memory is on the GPU
        current = probe.sample()
        before.append(Reading(time.monotonic(), current, classify(current, CHECK_POLICY), "-"))
        time.sleep(args.interval_s)
    owner = TorchOwner(args.phase_s, args.owner_gib)
    try:
        readings, markers = sample_loop(
            probe.sample, owner, interval_s=args.interval_s, tail_s=args.phase_s
        )
    finally:
        owner.stop()
        probe.close()
    del held
    report = analyse(before, readings, markers, own_mib)
    print(render(report))
    if args.out is not None:
        payload = asdict(report) | {"passed": report.passed, "markers": markers}
        args.out.write_text(json.dumps(payload, indent=1, default=str))
    return 0 if report.passed else 1
