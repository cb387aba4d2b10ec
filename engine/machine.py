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
auto`). That split is kept: on a shared 2-core machine (perf/RESULTS.md), binding
both cores to the worker (`0-1`) gave 0.56x the tokens per second at c=16 and 1.15x at
c=64, one run each under a load average of 7-12: no measured case for changing it.
The variable is vLLM's to read, so a value the user set is always what it uses.
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


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int  # CPUs this process may run on
    total_bytes: int
    available_bytes: int


def probe() -> Machine:
    import psutil

    memory = psutil.virtual_memory()
    return Machine(
        cores=len(os.sched_getaffinity(0)),
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
