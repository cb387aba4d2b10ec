"""The idle-GPU admission controller's policy and state machine (pure: time is passed in).

The GPU belongs to its owner first. Each probe sample is classified (idle, lightly
active, active) and drives four states:

    SERVING    admit up to `max_concurrent` requests
    THROTTLED  the owner is lightly active: admit up to `throttled_concurrent`
    DRAINING   the owner reclaims the GPU, the lending window closed, an operator
               asked, or the server is stopping: admit nothing, let in-flight requests
               finish within `grace_s`, then end them
    YIELDED    nothing runs: the engine is paused (and its memory released where the
               platform can); back to SERVING, warm, once the owner has been quiet
               for `resume_after_s` (the hysteresis that stops flapping)

The runtime (`engine.admission.runtime`) feeds samples in and carries out what each
transition means for the engine; the simulation (`python -m perf admission-sim`) drives the
same machine on simulated time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.admission.lending import LendingWindows
from engine.admission.probes import GpuSample


class State(enum.StrEnum):
    SERVING = "serving"
    THROTTLED = "throttled"
    DRAINING = "draining"
    YIELDED = "yielded"


ADMITTING = frozenset({State.SERVING, State.THROTTLED})


class Owner(enum.IntEnum):
    IDLE = 0
    LIGHT = 1
    ACTIVE = 2


@dataclass(frozen=True, slots=True)
class Policy:
    """The owner's terms. Defaults suit a workstation lent between jobs."""

    busy_util_pct: float = 20.0  # foreign SM utilization that means "the owner is back"
    light_util_pct: float = 5.0  # foreign utilization that means "lightly active"
    busy_memory_mib: float = 1024.0  # foreign memory that means "the owner is back"
    grace_s: float = 30.0  # in-flight requests may finish for this long after a reclaim
    resume_after_s: float = 60.0  # the owner must be quiet this long before we return
    probe_interval_s: float = 1.0
    # The KV budget is what bounds the running set; the cap bounds scheduling work.
    max_concurrent: int = 64
    throttled_concurrent: int = 2
    # Queued requests hold no KV cache: the queue is bounded by time (queue_timeout_s)
    # and this count in all. One client alone may fill it; while others wait, each
    # client gets an equal share (engine.admission.queue).
    max_queued: int = 1024
    queue_timeout_s: float = 300.0
    # Output tokens one request may ask for in all: `n` x `max_tokens` (x prompts).
    max_request_tokens: int = 32768
    kv_budget_tokens: int = 0  # 0: take the engine's KV-cache capacity (0 there: unbounded)
    release_memory: bool = True  # sleep the engine (free GPU memory) while yielded
    windows: LendingWindows | None = None  # None: lending is allowed at any time

    def cap(self, state: State) -> int:
        if state is State.SERVING:
            return self.max_concurrent
        if state is State.THROTTLED:
            return min(self.throttled_concurrent, self.max_concurrent)
        return 0


def classify(sample: GpuSample, policy: Policy) -> Owner:
    if sample.foreign_util_pct >= policy.busy_util_pct:
        return Owner.ACTIVE
    if sample.foreign_memory_mib >= policy.busy_memory_mib:
        return Owner.ACTIVE
    if sample.foreign_util_pct >= policy.light_util_pct:
        return Owner.LIGHT
    return Owner.IDLE


@dataclass(frozen=True, slots=True)
class Transition:
    source: State
    target: State
    at: float
    reason: str


class StateMachine:
    """States and their timers. `update` takes the latest owner reading; `tick` only
    the passage of time (a drain ends early when the last request leaves)."""

    def __init__(self, policy: Policy, now: float) -> None:
        self.policy = policy
        self.state = State.SERVING
        self.since = now
        self.reason = "started"
        self.owner = Owner.IDLE
        self.window_open = True
        self.manual_drain = False
        self.stopping = False
        self._drain_started = now
        self._quiet_since: float | None = now  # no reason to yield since
        self._idle_since: float | None = now  # ... and the owner fully idle since

    # ------------------------------------------------------------ inputs

    def update(
        self, now: float, owner: Owner, window_open: bool, in_flight: int
    ) -> list[Transition]:
        self.owner, self.window_open = owner, window_open
        return self.tick(now, in_flight)

    def drain(self, now: float, in_flight: int) -> list[Transition]:
        """An operator asks to stop lending until `resume`."""
        self.manual_drain = True
        return self.tick(now, in_flight)

    def resume(self, now: float, in_flight: int) -> list[Transition]:
        """An operator lifts their drain. The owner's terms still apply, but the
        hysteresis does not: the operator vouches that the GPU is free."""
        self.manual_drain = False
        if self._yield_reason() is None and self.owner is not Owner.ACTIVE:
            vouched = now - self.policy.resume_after_s
            self._quiet_since = min(self._quiet_since or now, vouched)
            if self.owner is Owner.IDLE:
                self._idle_since = self._quiet_since
        return self.tick(now, in_flight)

    def stop(self, now: float, in_flight: int) -> list[Transition]:
        """The server is stopping (SIGTERM): drain with grace; never come back."""
        self.stopping = True
        return self.tick(now, in_flight)

    # ------------------------------------------------------------ transitions

    def tick(self, now: float, in_flight: int) -> list[Transition]:
        reason = self._yield_reason()
        self._track_quiet(now, reason)
        transitions: list[Transition] = []
        # At most two steps per call (e.g. SERVING -> DRAINING -> YIELDED with nothing
        # in flight); each step's condition is re-read after the previous one.
        for _ in range(2):
            step = self._next(now, in_flight, reason)
            if step is None:
                break
            target, why = step
            transitions.append(Transition(self.state, target, now, why))
            if target is State.DRAINING:
                self._drain_started = now
            self.state, self.since, self.reason = target, now, why
        return transitions

    def retry_after_s(self, now: float) -> float:
        """When a rejected client may usefully come back: the rest of the drain plus the
        hysteresis, or the hysteresis still to wait."""
        wait = self.policy.resume_after_s
        if self.state is State.DRAINING:
            return max(0.0, self._drain_started + self.policy.grace_s - now) + wait
        if self._quiet_since is not None:
            return max(0.0, self._quiet_since + wait - now)
        return wait

    def grace_left_s(self, now: float) -> float:
        if self.state is not State.DRAINING:
            return 0.0
        return max(0.0, self._drain_started + self.policy.grace_s - now)

    def _yield_reason(self) -> str | None:
        if self.stopping:
            return "server stopping"
        if self.manual_drain:
            return "operator drain"
        if not self.window_open:
            return "lending window closed"
        if self.owner is Owner.ACTIVE:
            return "owner active"
        return None

    def _track_quiet(self, now: float, reason: str | None) -> None:
        if reason is not None:
            self._quiet_since = self._idle_since = None
            return
        self._quiet_since = now if self._quiet_since is None else self._quiet_since
        if self.owner is Owner.IDLE:
            self._idle_since = now if self._idle_since is None else self._idle_since
        else:
            self._idle_since = None

    def _calm_for(self, since: float | None, now: float) -> bool:
        return since is not None and now - since >= self.policy.resume_after_s

    def _next(self, now: float, in_flight: int, reason: str | None) -> tuple[State, str] | None:
        state = self.state
        if state in ADMITTING:
            if reason is not None:
                return State.DRAINING, reason
            if state is State.SERVING and self.owner is Owner.LIGHT:
                return State.THROTTLED, "owner lightly active"
            if state is State.THROTTLED and self._calm_for(self._idle_since, now):
                return State.SERVING, "owner idle"
            return None
        if state is State.DRAINING:
            if reason is None and self._calm_for(self._quiet_since, now):
                return State.SERVING, "drain lifted"  # in-flight requests carry on
            if in_flight == 0:
                return State.YIELDED, self.reason
            if now - self._drain_started >= self.policy.grace_s:
                return State.YIELDED, f"{self.reason}; grace period over"
            return None
        # YIELDED: return once quiet long enough; never while stopping.
        if reason is None and self._calm_for(self._quiet_since, now):
            if self.owner is Owner.IDLE:
                return State.SERVING, "owner idle"
            return State.THROTTLED, "owner lightly active"
        return None
