"""The deferred lane's accounting: what batch lines may take of admission's capacity.

Clients whose names start with `DEFERRED_PREFIX` are deferred work (batch lines), the
lowest lane. Such a ticket starts at once or not at all (it never waits in the queue,
so no interactive request ever waits behind one), and it may not take the last of a
model's capacity: an eighth of each model's cap and KV budget stays interactive.

Pure: these read the queue (`engine.admission.queue`) and the caps the controller
passes in; the controller (`engine.admission.runtime`) answers the deferred runner's
questions with them.
"""

from __future__ import annotations

from engine.admission.queue import AdmissionQueue, ModelLoad
from engine.protocol import DEFERRED_PREFIX as DEFERRED_PREFIX  # beside its engine priority

DEFERRED_HEADROOM_DIVISOR = 8  # an eighth of the cap and of the KV budget stays interactive


def is_deferred(client: str) -> bool:
    return client.startswith(DEFERRED_PREFIX)


def interactive_waiting(queue: AdmissionQueue, model: str | None = None) -> bool:
    """Whether an interactive request waits in the queue (for `model`, or any)."""
    return any(
        not is_deferred(t.client) and (model is None or t.model == model) for t in queue.waiting
    )


def interactive_running(queue: AdmissionQueue, model: str | None = None) -> int:
    """Interactive requests running (on `model`, or any)."""
    return sum(
        not is_deferred(t.client) and (model is None or t.model == model)
        for t in queue.running.values()
    )


def deferred_running(queue: AdmissionQueue) -> int:
    return sum(is_deferred(t.client) for t in queue.running.values())


def deferred_prefilling(queue: AdmissionQueue) -> int:
    """Deferred generations admitted whose first output has not come: prompts the engine
    is prefilling, or about to."""
    return sum(is_deferred(t.client) for t in queue.prefilling())


def deferred_room(queue: AdmissionQueue, cap: int, total_cap: int, model: str | None) -> int:
    """How many deferred generations may start now on `model`: none while a request
    waits for it; else the free part of its cap and of its KV budget, less the headroom
    kept for interactive requests. Without a model: the most any model has room for
    (a line for a model without room is refused, and runs later)."""
    if model is not None or not queue.models:  # nothing run yet: an empty model's room
        room = _model_room(queue, cap, model or "")
    else:
        room = max(_model_room(queue, cap, name) for name in queue.models)
    if total_cap > 0:
        room = min(room, total_cap - total_cap // DEFERRED_HEADROOM_DIVISOR - len(queue.running))
    return max(0, room)


def _model_room(queue: AdmissionQueue, cap: int, model: str) -> int:
    load = queue.models.get(model) or ModelLoad()
    if load.waiting:
        return 0
    budget = queue.budget_of(model)
    if budget > 0 and load.tokens_in_use >= budget - budget // DEFERRED_HEADROOM_DIVISOR:
        return 0
    return cap - cap // DEFERRED_HEADROOM_DIVISOR - load.running
