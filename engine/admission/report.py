"""What the admission controller shows: `/admin/admission`'s snapshot and each model's
load (running, queued, KV budget), which the metrics export labelled by model."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Protocol

from engine.admission.policy import Owner, StateMachine
from engine.admission.probes import GpuSample
from engine.admission.queue import AdmissionQueue


@dataclass(frozen=True, slots=True)
class ModelReport:
    model: str
    running: int
    queued: int
    concurrency_cap: int
    kv_budget_tokens: int  # 0 or less: unbounded
    kv_tokens_in_use: int


def model_loads(queue: AdmissionQueue, cap: int) -> list[ModelReport]:
    """Every model that has run a request, in the order they first did."""
    return [
        ModelReport(
            name,
            load.running,
            load.waiting,
            cap,
            queue.budget_of(name),
            load.tokens_in_use,
        )
        for name, load in queue.models.items()
    ]


class Reported(Protocol):
    """What the snapshot reads of the admission controller (engine.admission.runtime)."""

    @property
    def machine(self) -> StateMachine: ...
    @property
    def queue(self) -> AdmissionQueue: ...
    @property
    def last_sample(self) -> GpuSample: ...
    @property
    def engine_paused(self) -> bool: ...
    @property
    def memory_released(self) -> bool: ...
    @property
    def counters(self) -> Counter[str]: ...
    @property
    def events(self) -> deque[tuple[float, str]]: ...

    def concurrency_cap(self) -> int: ...

    def model_loads(self) -> list[ModelReport]: ...


def snapshot(controller: Reported, now: float) -> dict[str, Any]:
    machine, queue, sample = controller.machine, controller.queue, controller.last_sample
    return {
        "state": str(machine.state),
        "reason": machine.reason,
        "state_for_s": round(now - machine.since, 3),
        "owner": Owner(machine.owner).name.lower(),
        "window_open": machine.window_open,
        "operator_drain": machine.manual_drain,
        "stopping": machine.stopping,
        "grace_left_s": round(machine.grace_left_s(now), 3),
        "engine_paused": controller.engine_paused,
        "memory_released": controller.memory_released,
        "gpu": {
            "foreign_util_pct": sample.foreign_util_pct,
            "foreign_memory_mib": sample.foreign_memory_mib,
            "foreign_processes": sample.foreign_processes,
        },
        "running": len(queue.running),
        "queued": len(queue.waiting),
        "concurrency_cap": controller.concurrency_cap(),
        # The first model's, as with one model; each model's own are under `models`.
        "kv_budget_tokens": queue.budget_of(next(iter(queue.models), "")),
        "kv_tokens_in_use": queue.tokens_in_use,
        "models": {
            each.model: {
                "running": each.running,
                "queued": each.queued,
                "concurrency_cap": each.concurrency_cap,
                "kv_budget_tokens": each.kv_budget_tokens,
                "kv_tokens_in_use": each.kv_tokens_in_use,
            }
            for each in controller.model_loads()
        },
        "counters": dict(controller.counters),
        "recent": [{"at_s_ago": round(now - t, 3), "event": e} for t, e in controller.events][-20:],
    }
