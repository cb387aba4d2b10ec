"""The errors admission answers with when it will not run a request now: the GPU is
its owner's, the queue wait ran out, or a drain ended a running request."""

from __future__ import annotations

from engine.admission.policy import Policy, State, StateMachine
from engine.errors import AdmissionRejected, Drained


def not_admitting(machine: StateMachine, now: float) -> AdmissionRejected:
    return AdmissionRejected(
        503,
        "draining" if machine.state is State.DRAINING else "yielded",
        f"The GPU is handed back to its owner ({machine.reason}); no requests are admitted now.",
        retry_after_s=max(1.0, machine.retry_after_s(now)),
    )


def queue_timeout(policy: Policy) -> AdmissionRejected:
    return AdmissionRejected(
        503,
        "queue_timeout",
        f"The request waited {policy.queue_timeout_s:g} s in the queue; retry later.",
        retry_after_s=1.0,
    )


def drained(machine: StateMachine, now: float) -> Drained:
    return Drained(
        f"This request was ended: the GPU is handed back ({machine.reason}).",
        retry_after_s=max(1.0, machine.retry_after_s(now)),
    )


def no_room_for_deferred() -> AdmissionRejected:
    """Deferred work (a batch line) found no spare capacity: it runs later, never queued."""
    return AdmissionRejected(
        503,
        "deferred_no_room",
        "No spare capacity for deferred work now; it runs when there is.",
        retry_after_s=1.0,
    )
