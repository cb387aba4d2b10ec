"""Engine settings picked for the machine the server finds (CPU only; a GPU keeps
vLLM's defaults, which are tuned there).

KV cache. vLLM's CPU backend sizes its KV cache from `VLLM_CPU_KVCACHE_SPACE`, else
as a fraction (`--gpu-memory-utilization`, 0.9) of *total* memory, and refuses to
start when that much is not free: on a box with anything else running, the default
does not start. So when neither the flag nor the variable says, the cache takes half
of what is available after the weights and a safety margin (the larger of 2 GiB and a
tenth of the memory), between 1 and 64 GiB: on this 23 GiB machine with 15 GiB free,
6 GiB, room for about 130k tokens of SmolLM2 in float32.

Threads. vLLM binds its CPU worker's OpenMP threads to all cores but one, which it
leaves to the engine core's scheduler and the frontend (`VLLM_CPU_OMP_THREADS_BIND=
auto`). On a box of one or two cores that leaves the model half the machine: on the
2-core machine of perf/RESULTS.md, binding the worker to both cores gave 1.43x and
1.60x `vllm serve`'s tokens per second (which keeps `auto`) at c=16 and 1.66x at c=64,
with TTFT p50 at 0.37-0.51x, on a quiet machine. So one engine on such a box gets
every core; a larger box, a pool of several engines and a model split over several
workers keep `auto` (not measured). The variable is vLLM's to read, so a value the
user set is always what it uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
KV_SHARE = 0.5  # of the memory left after weights and margin
KV_MIN_GIB = 1
KV_MAX_GIB = 64
MARGIN_MIN_BYTES = 2 * GIB
MARGIN_FRACTION = 0.1
SMALL_BOX_CORES = 2  # at most this many cores: the model's threads take them all


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int  # CPUs this process may run on
    total_bytes: int
    available_bytes: int
    cpu_ids: tuple[int, ...] = ()  # their ids, as the OpenMP binding names them


def probe() -> Machine:
    import psutil

    memory = psutil.virtual_memory()
    cpu_ids = tuple(sorted(os.sched_getaffinity(0)))
    return Machine(
        cores=len(cpu_ids),
        cpu_ids=cpu_ids,
        total_bytes=int(memory.total),
        available_bytes=int(memory.available),
    )


def weights_bytes(model: str) -> int:
    """The checkpoint's weight files on disk (0 for a hub id not downloaded here)."""
    path = Path(model)
    if not path.is_dir():
        return 0
    return sum(
        f.stat().st_size for f in path.iterdir() if f.suffix in (".safetensors", ".bin", ".pt")
    )


def cpu_kv_cache_gib(machine: Machine, weights: int, engines: int = 1) -> int:
    """GiB of KV cache for each of `engines` CPU engines when the user did not say (see
    module): a pool of several models splits the share, so together they take no more
    than one engine would."""
    margin = max(MARGIN_MIN_BYTES, int(machine.total_bytes * MARGIN_FRACTION))
    spare = machine.available_bytes - weights - margin
    share = int(spare * KV_SHARE / max(1, engines) / GIB)
    return max(KV_MIN_GIB, min(KV_MAX_GIB, share))


def cpu_threads_bind(machine: Machine, workers: int, engines: int) -> str | None:
    """The OpenMP binding for one engine of one worker on a small box (see module): every
    core this process may use, as vLLM's CPU list; None keeps vLLM's `auto`."""
    if workers != 1 or engines != 1 or not machine.cpu_ids:
        return None
    if machine.cores > SMALL_BOX_CORES:
        return None
    return ",".join(str(cpu) for cpu in machine.cpu_ids)
