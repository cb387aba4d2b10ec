"""GPU probes: NVML against a fake pynvml module, the scripted timeline, the factory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.admission.probes import (
    MIB,
    GpuSample,
    NoneProbe,
    NvmlProbe,
    ScriptedProbe,
    make_probe,
    parse_timeline,
)

OURS = {100, 101}


class FakeNVMLError(Exception):
    pass


@dataclass
class FakeDevice:
    util: int = 0
    used: int = 0
    compute: list[SimpleNamespace] = field(default_factory=list)
    graphics: list[SimpleNamespace] = field(default_factory=list)
    process_util: list[SimpleNamespace] | None = None  # None: unsupported


class FakeNvml:
    """The slice of pynvml's API that NvmlProbe uses."""

    NVMLError = FakeNVMLError

    def __init__(self, devices: list[FakeDevice]) -> None:
        self.devices = devices
        self.initialized = False
        self.since: list[int] = []

    def nvmlInit(self) -> None:
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetComputeRunningProcesses(self, device: FakeDevice) -> list[SimpleNamespace]:
        return device.compute

    def nvmlDeviceGetGraphicsRunningProcesses(self, device: FakeDevice) -> list[SimpleNamespace]:
        return device.graphics

    def nvmlDeviceGetMemoryInfo(self, device: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(used=device.used, total=80 * 1024 * MIB)

    def nvmlDeviceGetUtilizationRates(self, device: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=device.util, memory=0)

    def nvmlDeviceGetProcessUtilization(self, device: FakeDevice, since: int) -> list:
        self.since.append(since)
        if device.process_util is None:
            raise FakeNVMLError("Not Supported")
        return device.process_util


def proc(pid: int, mib: float | None) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else int(mib * MIB))


def util(pid: int, sm: int, stamp: int = 5) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, timeStamp=stamp)


def probe(*devices: FakeDevice) -> tuple[NvmlProbe, FakeNvml]:
    nvml = FakeNvml(list(devices))
    return NvmlProbe(nvml, ours=lambda: OURS), nvml


def test_only_our_processes_reads_idle() -> None:
    device = FakeDevice(
        util=95, used=30_000 * MIB, compute=[proc(100, 29_000), proc(101, 1000)], process_util=[]
    )
    assert probe(device)[0].sample() == GpuSample(0.0, 0.0, 0)


def test_foreign_process_memory_and_per_process_utilization() -> None:
    device = FakeDevice(
        util=90,
        compute=[proc(100, 20_000), proc(555, 3000)],
        process_util=[util(100, 60, stamp=7), util(555, 30, stamp=9)],
    )
    nvml_probe, nvml = probe(device)
    assert nvml_probe.sample() == GpuSample(30.0, 3000.0, 1)
    # The next read asks only for samples newer than the last one seen.
    nvml_probe.sample()
    assert nvml.since == [0, 9]


def test_without_process_samples_a_foreign_process_owns_the_device_utilization() -> None:
    device = FakeDevice(util=70, compute=[proc(100, 100)], graphics=[proc(777, 50)])
    assert probe(device)[0].sample() == GpuSample(70.0, 50.0, 1)
    alone = FakeDevice(util=70, compute=[proc(100, 100)])
    assert probe(alone)[0].sample().foreign_util_pct == 0.0


def test_hidden_per_process_memory_falls_back_to_device_used_minus_ours() -> None:
    """In containers NVML reports usedGpuMemory as None for other namespaces' processes."""
    device = FakeDevice(used=12_000 * MIB, compute=[proc(100, 10_000), proc(888, None)])
    assert probe(device)[0].sample().foreign_memory_mib == pytest.approx(2000.0)


def test_busiest_device_counts() -> None:
    quiet = FakeDevice(compute=[proc(100, 1)], process_util=[])
    busy = FakeDevice(compute=[proc(300, 8000)], process_util=[util(300, 85)])
    nvml_probe, nvml = probe(quiet, busy)
    assert nvml_probe.sample() == GpuSample(85.0, 8000.0, 1)
    nvml_probe.close()
    assert not nvml.initialized


def test_device_indices_select_gpus() -> None:
    busy = FakeDevice(compute=[proc(300, 8000)], process_util=[util(300, 85)])
    nvml = FakeNvml([FakeDevice(), busy])
    assert NvmlProbe(nvml, device_indices=[0], ours=lambda: OURS).sample() == GpuSample()


def test_timeline_parsing_and_playback(tmp_path: Path) -> None:
    path = tmp_path / "owner.timeline"
    path.write_text("# offset util mem\n0 0\n5 80 4096  # training job\n9.5 3\n")
    clock = [0.0]
    scripted = ScriptedProbe.from_file(path, clock=lambda: clock[0])
    readings = []
    for t in (0.0, 4.9, 5.0, 9.4, 9.5, 100.0):
        clock[0] = t
        readings.append(scripted.sample())
    assert [r.foreign_util_pct for r in readings] == [0, 0, 80, 80, 3, 3]
    assert readings[2] == GpuSample(80.0, 4096.0, 1)
    clock[0] = 105.0
    scripted.restart()
    assert scripted.sample().foreign_util_pct == 0


def test_scripted_probe_follows_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "owner.timeline"
    path.write_text("0 0\n")
    clock = [0.0]
    scripted = ScriptedProbe.from_file(path, clock=lambda: clock[0])
    clock[0] = 50.0
    assert scripted.sample().foreign_util_pct == 0
    path.write_text("0 90\n2 0\n")
    os.utime(path, ns=(1, 1))  # a new modification time, whatever the file system's resolution
    assert scripted.sample().foreign_util_pct == 90  # plays from the moment it was seen
    clock[0] = 52.0
    assert scripted.sample().foreign_util_pct == 0
    path.write_text("not a timeline\n")
    os.utime(path, ns=(2, 2))
    assert scripted.sample().foreign_util_pct == 0  # broken rewrite ignored
    assert scripted.segments[0].sample.foreign_util_pct == 90


@pytest.mark.parametrize("text", ["1 2 3 4", "5 x", "3 0\n2 50"])
def test_bad_timelines_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="timeline line"):
        parse_timeline(text)


def test_make_probe(tmp_path: Path) -> None:
    assert isinstance(make_probe("none"), NoneProbe)
    assert NoneProbe().sample() == GpuSample()
    (tmp_path / "t").write_text("0 50\n")
    assert make_probe(f"scripted:{tmp_path / 't'}").sample().foreign_util_pct == 50
    with pytest.raises(ValueError, match="unknown GPU probe"):
        make_probe("amd")


def test_a_rewritten_timeline_file_plays_from_the_moment_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "owner.timeline"
    path.write_text("0 0\n")
    clock = [100.0]
    scripted = ScriptedProbe.from_file(path, clock=lambda: clock[0])
    assert scripted.sample().foreign_util_pct == 0
    clock[0] = 200.0
    path.write_text("0 90 8000\n3 0  # the owner works for 3 s from now\n")
    assert scripted.sample() == GpuSample(90.0, 8000.0, 1)
    clock[0] = 202.9
    assert scripted.sample().foreign_util_pct == 90
    clock[0] = 203.0
    assert scripted.sample().foreign_util_pct == 0
