"""The admission controller at run time: samples the probe, drives the state machine,
pauses and resumes the engine, and gates every generation.

The state (the owner's GPU) is the box's: a drain or a yield stops every model. The
running side is each model's: a request is admitted against its own engine's
concurrency cap and KV budget (taken from that engine's KV cache), in one fair queue
across the models (`engine.admission.queue`).

Each generation holds a lease (`AdmissionController.lease`, used by
`engine.admission.lease.admitted`): entering waits for admission or raises
`AdmissionRejected`; a drain whose grace period runs out revokes the lease, and the
stream ends with `Drained`. The HTTP side maps both in `app.errors`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

from engine.admission import deferred, refusals, report
from engine.admission.deferred import DEFERRED_PREFIX as DEFERRED_PREFIX
from engine.admission.lease import Lease, ticket_for
from engine.admission.policy import (
    ADMITTING,
    Owner,
    Policy,
    State,
    StateMachine,
    Transition,
    classify,
)
from engine.admission.probes import GpuSample, Probe
from engine.admission.queue import AdmissionQueue, Ticket
from engine.admission.waiters import Waiters
from engine.checks import require_ready
from engine.errors import AdmissionRejected, Drained
from engine.protocol import GenerateRequest, ModelHost, ModelInfo
from engine.ticks import sleep_to_tick

log = logging.getLogger("lilac.admission")

_FAILED_PROBE = GpuSample(foreign_util_pct=100.0)  # an unreadable GPU counts as the owner's


class AdmittedHost(ModelHost, Protocol):
    """What admission asks of the engine (one engine, or every model of a pool at
    once): the host side, and ending a request it drains."""

    async def abort(self, request_id: str) -> None: ...


STOP_SLACK_S = 5.0  # past the grace period and one probe: the stragglers' aborts


def stop_wait_limit_s(policy: Policy) -> float:
    """The longest `AdmissionController.stop` waits for in-flight requests."""
    return policy.grace_s + policy.probe_interval_s + STOP_SLACK_S


class AdmissionController:
    def __init__(
        self,
        policy: Policy,
        probe: Probe,
        engine: AdmittedHost,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.probe = probe
        self._engine = engine
        self._clock = clock
        self._wall_clock = wall_clock
        self.machine = StateMachine(policy, clock())
        self.queue = AdmissionQueue(policy)
        self._leases: dict[int, Lease] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()  # transitions' effects on the engine run one at a time
        self._yielded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.engine_paused = False
        self.memory_released = False
        self.last_sample = GpuSample()
        self.counters: Counter[str] = Counter()
        self.waiters = Waiters(self.queue, policy, self.counters, self._caps)
        # (clock time, event): transitions and the moments their effects completed.
        self.events: deque[tuple[float, str]] = deque(maxlen=200)
        # Called with (what, seconds) for "yield" (reclaim seen -> engine paused),
        # "return" (admitting again -> engine resumed) and "queue_wait" (per admitted
        # request, in its own task); metrics and the access log listen.
        self.observers: list[Callable[[str, float], None]] = []
        # Called with its model when an interactive request has to queue: deferred work
        # on that model makes room.
        self.interactive_queued: list[Callable[[str], None]] = []
        # Called with its model as each interactive request is offered: deferred work on
        # that model steps aside.
        self.interactive_arrived: list[Callable[[str], None]] = []
        # Called when a deferred generation's first output comes (its prompt is
        # prefilled): deferred work may start the next lines.
        self.deferred_prefilled: list[Callable[[], None]] = []
        self.interference_s = 0.0  # time the owner was active or light while we ran
        self._reclaimed_at: float | None = None
        self._last_observed: float | None = None

    # ------------------------------------------------------------ lifecycle

    @property
    def state(self) -> State:
        return self.machine.state

    def admitting(self) -> bool:
        return self.machine.state in ADMITTING

    # The deferred lane's questions (app.deferred's Capacity), per model or the box's.

    def interactive_waiting(self, model: str | None = None) -> bool:
        """Whether an interactive request waits in the queue (deferred work never does)."""
        return deferred.interactive_waiting(self.queue, model)

    def interactive_running(self, model: str | None = None) -> int:
        return deferred.interactive_running(self.queue, model)

    def deferred_running(self) -> int:
        return deferred.deferred_running(self.queue)

    def deferred_prefilling(self) -> int:
        return deferred.deferred_prefilling(self.queue)

    def deferred_room(self, model: str | None = None) -> int:
        """How many deferred generations may start now (on `model`, or the most any
        model may take): none unless admitting with the engines running."""
        if not self.admitting() or self.engine_paused:
            return 0
        return deferred.deferred_room(self.queue, self._cap(), self._total_cap(), model)

    def retry_after_s(self) -> float:
        return max(1.0, self.machine.retry_after_s(self._clock()))

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="admission-probe")

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        """SIGTERM: admit nothing more; wait for in-flight requests at most the grace
        period (the probe loop ends stragglers), then return."""
        await self._apply(self.machine.stop(self._clock(), len(self.queue.running)))
        limit = stop_wait_limit_s(self.policy)
        try:
            async with asyncio.timeout(limit):
                await self._yielded.wait()
        except TimeoutError:
            log.warning("drain on stop did not finish within %.0f s", limit)

    async def drain(self) -> None:
        await self._apply(self.machine.drain(self._clock(), len(self.queue.running)))

    async def resume(self) -> None:
        await self._apply(self.machine.resume(self._clock(), len(self.queue.running)))

    # ------------------------------------------------------------ sampling

    async def _run(self) -> None:
        while True:
            try:
                await self.observe(await self._sample())
            except Exception:
                log.exception("admission step failed")
            await sleep_to_tick(self.policy.probe_interval_s)  # the shared grid

    async def _sample(self) -> GpuSample:
        try:
            if self.probe.blocking:
                return await asyncio.to_thread(self.probe.sample)
            return self.probe.sample()
        except Exception:
            log.exception("GPU probe failed; treating the owner as active")
            return _FAILED_PROBE

    async def observe(self, sample: GpuSample) -> None:
        now = self._clock()
        self._count_interference(now)
        self.last_sample = sample
        windows = self.policy.windows
        window_open = windows is None or windows.is_open(self._wall_clock())
        owner = classify(sample, self.policy)
        transitions = self.machine.update(now, owner, window_open, len(self.queue.running))
        for ticket in self.queue.expire(now):
            self.waiters.reject(ticket, self.waiters.queue_timeout())
        await self._apply(transitions)

    def _count_interference(self, now: float) -> None:
        """Add the time since the last sample when the owner was using the GPU while our
        engine was not paused: seconds the owner shared the GPU with us."""
        last, self._last_observed = self._last_observed, now
        if last is not None and self.machine.owner != Owner.IDLE and not self.engine_paused:
            self.interference_s += now - last

    def _observe(self, what: str, seconds: float) -> None:
        for observer in self.observers:
            try:
                observer(what, seconds)
            except Exception:
                log.exception("admission observer failed")

    # ------------------------------------------------------------ effects

    async def _apply(self, transitions: list[Transition]) -> None:
        async with self._lock:
            for transition in transitions:
                self._record(transition)
                if transition.source in ADMITTING and transition.target not in ADMITTING:
                    self._reclaimed_at = transition.at
                if transition.target is State.DRAINING:
                    for ticket in self.queue.clear_waiting():
                        error = refusals.not_admitting(self.machine, self._clock())
                        self.waiters.reject(ticket, error)
                if transition.target is State.YIELDED:
                    await self._yield()
            if self.admitting() and self.engine_paused:
                # Also retries a return whose resume failed at an earlier sample.
                returning_since = self._clock()
                await self._return()
                self._observe("return", self._clock() - returning_since)
            self.waiters.grant()

    def _record(self, transition: Transition) -> None:
        log.info("admission %s -> %s (%s)", transition.source, transition.target, transition.reason)
        self.counters[f"to_{transition.target}"] += 1
        self.events.append((transition.at, str(transition.target)))

    async def _yield(self) -> None:
        leases = [lease for lease in self._leases.values() if not lease.revoked]
        for lease in leases:
            lease.revoked = True
        self.counters["drained"] += len(leases)
        await asyncio.gather(
            *(self._engine.abort(lease.request_id) for lease in leases), return_exceptions=True
        )
        if self._engine.is_ready():
            await self._engine.pause()
            self.engine_paused = True
            if self.policy.release_memory:
                self.memory_released = await self._engine.release_memory()
        paused_at = self._clock()
        self.events.append((paused_at, "engine_paused"))
        self._yielded.set()
        reclaimed_at, self._reclaimed_at = self._reclaimed_at, None
        if reclaimed_at is not None:
            self._observe("yield", paused_at - reclaimed_at)

    async def _return(self) -> None:
        self._yielded.clear()
        if self.memory_released:
            await self._engine.reacquire_memory()
            self.memory_released = False
        if self.engine_paused:
            await self._engine.resume()
            self.engine_paused = False
        self.events.append((self._clock(), "engine_resumed"))

    # ------------------------------------------------------------ admission

    def _cap(self) -> int:
        """Each model's cap on running requests in the current state."""
        return 0 if self.engine_paused else self.policy.cap(self.machine.state)

    def _total_cap(self) -> int:
        """The cap on every model's running requests together (0: none): while the owner
        is lightly active the throttled cap is the GPU's, whatever model runs."""
        return self._cap() if self.machine.state is State.THROTTLED else 0

    def concurrency_cap(self) -> int:
        """How many requests may run at once now (the state's cap)."""
        return self._cap()

    def _caps(self) -> tuple[int, int]:
        return self._cap(), self._total_cap()

    @asynccontextmanager
    async def lease(
        self, request: GenerateRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[Lease]:
        """Admission around one generation on `model`'s engine (None: the host's own
        model): on entry the engine must be ready and the request admitted against that
        model's budget (now, or after a wait in the queue), else this raises
        `EngineUnavailable` or `AdmissionRejected`; on exit the slot is given back. The
        holder calls `Lease.check` after each output to end a revoked generation."""
        require_ready(self._engine)
        model = model or self._engine.model
        self.waiters.use_model(model)
        ticket = ticket_for(next(self._ids), request, model)
        lease = await self._acquire(ticket, request.request_id)
        try:
            yield lease
        finally:
            self._release(lease)

    async def _acquire(self, ticket: Ticket, request_id: str) -> Lease:
        """Admit a ticket now, after a wait in the queue, or raise AdmissionRejected."""
        now = self._clock()
        self.counters["offered"] += 1
        if not self.admitting():
            self.waiters.count_rejection("draining" if self.state is State.DRAINING else "yielded")
            raise refusals.not_admitting(self.machine, now)
        if not deferred.is_deferred(ticket.client):
            for listener in self.interactive_arrived:
                listener(ticket.model)
        ticket.arrived, ticket.deadline = now, now + self.policy.queue_timeout_s
        self.queue.now = now
        try:
            started = self.queue.offer(ticket, self._cap(), self._total_cap())
        except AdmissionRejected as exc:
            self.waiters.count_rejection(exc.code)
            raise
        if not started and deferred.is_deferred(ticket.client):
            self.queue.withdraw(ticket.id)  # deferred work never queues
            self.waiters.count_rejection("deferred_no_room")
            raise refusals.no_room_for_deferred()
        if not started:
            for listener in self.interactive_queued:
                listener(ticket.model)
            await self.waiters.wait(ticket)
        lease = Lease(ticket, request_id, self._drained_error, self._prefilled)
        self._leases[ticket.id] = lease
        self.counters["admitted"] += 1
        self._observe("queue_wait", self._clock() - now)
        return lease

    def _drained_error(self) -> Drained:
        return refusals.drained(self.machine, self._clock())

    def _prefilled(self, lease: Lease) -> None:
        self.queue.prefilled(lease.ticket.id)
        self.waiters.grant()  # a client held back by its prefills may go on
        if deferred.is_deferred(lease.ticket.client):
            for listener in self.deferred_prefilled:
                listener()

    def _release(self, lease: Lease) -> None:
        self._leases.pop(lease.ticket.id, None)
        self.queue.now = self._clock()
        self.queue.release(lease.ticket.id)
        self.counters["drained_ended" if lease.revoked else "completed"] += 1
        if self.machine.state is State.DRAINING:
            # The last request out ends the drain at once, not at the next sample.
            transitions = self.machine.tick(self._clock(), len(self.queue.running))
            if transitions:
                task = asyncio.create_task(self._apply(transitions))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        self.waiters.grant()

    # ------------------------------------------------------------ reporting

    def snapshot(self) -> dict[str, Any]:
        return report.snapshot(self, self._clock())

    def model_loads(self) -> list[report.ModelReport]:
        """Each model's running, queued and KV budget, for `/admin/admission` and metrics."""
        return report.model_loads(self.queue, self._cap())
