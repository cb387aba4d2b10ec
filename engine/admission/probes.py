"""GPU probes: how busy the GPU's owner is, as seen from outside our own processes.

Three probes share one interface (`sample() -> GpuSample`):

- `NvmlProbe` reads NVML (nvidia-ml-py, imported lazily: CPU installs lack it) and
  reports the utilization, memory and processes that are *not ours*;
- `NoneProbe` is for machines without a GPU: the owner is never there;
- `ScriptedProbe` plays back a timeline file of owner activity, for tests and
  the simulation.

The admission controller samples the probe on an interval; a probe only measures,
it never decides (the thresholds live in `engine.admission.policy.Policy`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Owner activity at one instant; with several GPUs, the busiest one counts."""

    foreign_util_pct: float = 0.0  # SM utilization caused by processes that are not ours
    foreign_memory_mib: float = 0.0  # memory held by processes that are not ours
    foreign_processes: int = 0


IDLE = GpuSample()


class Probe(Protocol):
    # True when `sample` may block (NVML calls): the controller runs it in a thread.
    blocking: bool

    def sample(self) -> GpuSample: ...


class NoneProbe:
    """No GPU, or lending unconditionally: the owner is always idle."""

    blocking = False

    def sample(self) -> GpuSample:
        return IDLE


# ---------------------------------------------------------------- scripted timeline


@dataclass(frozen=True, slots=True)
class Segment:
    start_s: float  # offset from the start of the timeline; holds until the next segment
    sample: GpuSample


def parse_timeline(text: str) -> list[Segment]:
    """One segment a line: `<offset_s> <foreign_util_pct> [<foreign_memory_mib>]`.
    `#` starts a comment. Offsets must increase; before the first one the owner is idle."""
    segments: list[Segment] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        try:
            values = [float(field) for field in fields]
        except ValueError as exc:
            raise ValueError(f"timeline line {number}: {exc}") from exc
        if len(values) not in (2, 3):
            raise ValueError(f"timeline line {number}: expected 2 or 3 numbers, got {line!r}")
        if segments and values[0] <= segments[-1].start_s:
            raise ValueError(f"timeline line {number}: offsets must increase")
        memory = values[2] if len(values) == 3 else 0.0
        busy = int(values[1] > 0 or memory > 0)
        segments.append(Segment(values[0], GpuSample(values[1], memory, busy)))
    return segments


def sample_at(segments: Sequence[Segment], offset_s: float) -> GpuSample:
    current = IDLE
    for segment in segments:
        if segment.start_s > offset_s:
            break
        current = segment.sample
    return current


class ScriptedProbe:
    """Owner activity from a timeline, on the injected clock, from the probe's creation.

    Made `from_file`, the probe follows the file: when it is replaced (a new
    modification time), the new timeline plays from that moment. A fault harness
    injects an owner reclaim into a running server that way; a rewritten file that
    does not parse is ignored and the old timeline goes on."""

    blocking = False

    def __init__(
        self,
        segments: Sequence[Segment],
        clock: Callable[[], float] = time.monotonic,
        *,
        path: Path | None = None,
    ) -> None:
        self.segments = list(segments)
        self._clock = clock
        self._path = path
        self._version = _file_version(path) if path is not None else None
        self.started_at = clock()

    @classmethod
    def from_file(
        cls, path: str | Path, clock: Callable[[], float] = time.monotonic
    ) -> ScriptedProbe:
        return cls(parse_timeline(Path(path).read_text()), clock, path=Path(path))

    def restart(self) -> None:
        """Play the timeline from its beginning again (tests align it with their load)."""
        self.started_at = self._clock()

    def sample(self) -> GpuSample:
        self._follow_file()
        return sample_at(self.segments, self._clock() - self.started_at)

    def _follow_file(self) -> None:
        if self._path is None:
            return
        version = _file_version(self._path)
        if version == self._version:
            return
        self._version = version
        try:
            segments = parse_timeline(self._path.read_text())
        except (OSError, ValueError):
            return  # half-written or broken: keep playing the timeline we have
        self.segments = segments
        self.restart()


def _file_version(path: Path) -> tuple[int, int] | None:
    """Modification time and size: a rewrite within one timestamp tick still shows."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


# ---------------------------------------------------------------- NVML


def our_process_ids() -> set[int]:
    """This process and its descendants (vLLM's engine core, its workers)."""
    pids = {os.getpid()}
    try:
        import psutil

        pids.update(child.pid for child in psutil.Process().children(recursive=True))
    except Exception:  # psutil missing or a child gone mid-walk: ourselves is enough
        pass
    return pids


class NvmlProbe:
    """Foreign activity from NVML. `nvml` is the `pynvml` module (injectable for tests).

    Utilization: NVML's per-process SM samples when the driver offers them, else the
    whole device's utilization whenever a foreign process is present (ours cannot be
    told apart then, so a foreign process makes all of it count as the owner's).
    Memory: what foreign processes hold; when the driver hides per-process memory
    (containers), the device's used memory minus what our processes hold.
    """

    blocking = True

    def __init__(
        self,
        nvml: Any = None,
        *,
        device_indices: Iterable[int] | None = None,
        ours: Callable[[], set[int]] = our_process_ids,
    ) -> None:
        if nvml is None:
            import pynvml  # nvidia-ml-py, in the `gpu` extra

            nvml = pynvml
        self._nvml = nvml
        self._ours = ours
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        indices = range(count) if device_indices is None else device_indices
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        # NVML returns process samples newer than this timestamp (microseconds).
        self._last_seen = [0] * len(self._handles)

    def close(self) -> None:
        self._nvml.nvmlShutdown()

    def sample(self) -> GpuSample:
        ours = self._ours()
        util = memory = 0.0
        processes = 0
        for position, handle in enumerate(self._handles):
            device_util, device_memory, device_processes = self._device(position, handle, ours)
            util = max(util, device_util)
            memory = max(memory, device_memory)
            processes += device_processes
        return GpuSample(util, memory, processes)

    def _device(self, position: int, handle: Any, ours: set[int]) -> tuple[float, float, int]:
        nvml = self._nvml
        running = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        running += nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
        foreign = {p.pid: p for p in running if p.pid not in ours}
        memory = self._foreign_memory(handle, running, foreign)
        util = self._foreign_util(position, handle, ours, bool(foreign))
        return util, memory, len(foreign)

    def _foreign_memory(self, handle: Any, running: list[Any], foreign: dict[int, Any]) -> float:
        sizes = [p.usedGpuMemory for p in foreign.values()]
        if all(size is not None for size in sizes):
            return sum(sizes) / MIB
        used = self._nvml.nvmlDeviceGetMemoryInfo(handle).used
        own = sum(p.usedGpuMemory or 0 for p in running if p.pid not in foreign)
        return max(0.0, (used - own) / MIB)

    def _foreign_util(self, position: int, handle: Any, ours: set[int], any_foreign: bool) -> float:
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen[position])
        except nvml.NVMLError:
            # No per-process samples (unsupported driver, or none since last time).
            samples = None
        if samples:
            self._last_seen[position] = max(s.timeStamp for s in samples)
            return float(sum(s.smUtil for s in samples if s.pid not in ours))
        if not any_foreign:
            return 0.0
        return float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def make_probe(spec: str, clock: Callable[[], float] = time.monotonic) -> Probe:
    """`none`, `nvml`, or `scripted:PATH` (a timeline file, see `parse_timeline`)."""
    if spec == "none":
        return NoneProbe()
    if spec == "nvml":
        return NvmlProbe()
    if spec.startswith("scripted:"):
        return ScriptedProbe.from_file(spec.removeprefix("scripted:"), clock)
    raise ValueError(f"unknown GPU probe {spec!r}: expected none, nvml or scripted:PATH")
