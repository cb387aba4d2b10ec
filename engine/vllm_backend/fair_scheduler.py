"""vLLM's scheduler with a fair share between tenants (engine.fairness), run in the
engine-core process (vLLM's `SchedulerConfig.scheduler_cls`).

Each request carries its tenant and weight in its sampling parameters' `extra_args`
(`tenant_args`). Before every step:

- each request's vLLM priority is set from its tier and its tenant's counter
  (`effective_priority`): the waiting queue runs the least-served tenant first, and
  when the KV cache runs short vLLM preempts the request with the largest priority,
  which is now the most-served tenant's (within the lowest tier);
- a running request still prefilling whose tenant has been served more than a waiting
  request's tenant sits out the step when the step's token budget, given lightest
  first, has no room left for it (`held_prefills`): vLLM gives running requests the
  budget before any waiting one, so without this a heavy tenant's long prompts would
  hold every step.

After every step each scheduled request's tokens are charged to its tenant: the tokens
computed for its prompt, one output token when the step samples one, and on its first
step the prompt tokens the prefix cache served.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from engine.fairness import (
    CONFIG_KEY,
    TENANT_ARG,
    UNNAMED,
    WEIGHT_ARG,
    ServiceCosts,
    ServiceLedger,
    StepClock,
    write_shares,
)

COUNTER_SPAN = 1 << 48  # a tier's room for counters in one priority integer
PUBLISH_EVERY_S = 1.0
# Prompt tokens a prefill may compute in a step where a less-served client's request
# waits: the step stays short, so that request's first token comes soon.
CONTENDED_CHUNK = 256


def effective_priority(base: int, counter: float) -> int:
    """One integer for vLLM (lower runs sooner): the tier first, then the counter."""
    return base * COUNTER_SPAN + min(max(int(counter), 0), COUNTER_SPAN - 1)


@dataclass(frozen=True, slots=True)
class ContendedStep:
    held: list[Request]  # running prefills that sit the step out
    token_budget: int
    chunk: int  # the most prompt tokens of one request in the step


@dataclass(slots=True)
class Entry:
    tenant: str
    base: int  # the priority the request came with (its tier and deferred offset)
    started: bool = False  # scheduled at least once (its queue wait is recorded)


class FairShare:
    """The fair-share behaviour, mixed into vLLM's scheduler classes below."""

    # Set by the scheduler classes' own __init__ (vLLM's Scheduler).
    requests: dict[str, Request]
    running: list[Request]
    waiting: Any
    max_num_scheduled_tokens: int
    max_num_active_reqs: int
    scheduler_config: Any
    vllm_config: Any

    def _init_fairness(self) -> None:
        settings = dict((self.vllm_config.additional_config or {}).get(CONFIG_KEY) or {})
        self.ledger = ServiceLedger(ServiceCosts.from_settings(settings))
        self.fair_hold = bool(settings.get("hold_prefills", True))
        self.contended_chunk = int(settings.get("contended_chunk", CONTENDED_CHUNK))
        self.shares_path: str | None = settings.get("shares_path")
        self._entries: dict[str, Entry] = {}
        self.step_clock = StepClock()
        self._published = 0.0
        self._changed = False

    # vLLM's hooks

    def add_request(self, request: Request) -> None:
        if request.request_id not in self._entries:
            tenant, weight = _tenant_of(request)
            self._entries[request.request_id] = Entry(tenant, request.priority)
            self.ledger.arrive(tenant, weight)
            request.priority = effective_priority(request.priority, self.ledger.counter(tenant))
        super().add_request(request)  # type: ignore[misc]

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        entry = self._entries.pop(request.request_id, None)
        if entry is not None:
            self.ledger.leave(entry.tenant, time.time())
            self._changed = True
        freed = super()._free_request(request, delay_free_blocks)  # type: ignore[misc]
        if not self._entries:  # the engine is idle now: no step will publish for a while
            self._publish(at_once=True)
        return freed

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self._reprioritize()
        step = self._contended_step() if self.fair_hold else None
        if step is None:
            output: SchedulerOutput = super().schedule(*args, **kwargs)  # type: ignore[misc]
        else:
            output = self._schedule_contended(step, *args, **kwargs)
        self.step_clock.scheduled(time.time(), bool(output.num_scheduled_tokens))
        self._charge(output)
        self._publish()
        return output

    def _schedule_contended(self, step: ContendedStep, *args: Any, **kwargs: Any) -> Any:
        """vLLM's step with the held prefills out of the running list, every prefill cut
        to the step's chunk and the step's token budget as the plan has it."""
        config = self.scheduler_config
        threshold, budget = config.long_prefill_token_threshold, self.max_num_scheduled_tokens
        held = {id(r) for r in step.held}
        self.running[:] = [r for r in self.running if id(r) not in held]
        config.long_prefill_token_threshold = step.chunk
        self.max_num_scheduled_tokens = step.token_budget
        try:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            config.long_prefill_token_threshold = threshold
            self.max_num_scheduled_tokens = budget
            self.running.extend(step.held)

    # The order

    def _reprioritize(self) -> None:
        """Each request's priority from its tenant's counter as it is now; the waiting
        queue re-ordered when any of its priorities moved."""
        moved = False
        for request in self.running:
            self._refresh(request)
        for request in list(self.waiting):
            moved |= self._refresh(request)
        if moved:
            waiting = list(self.waiting)
            self.waiting.remove_requests(waiting)
            for request in waiting:
                self.waiting.add_request(request)

    def _refresh(self, request: Request) -> bool:
        entry = self._entries.get(request.request_id)
        if entry is None:
            return False
        priority = effective_priority(entry.base, self.ledger.counter(entry.tenant))
        if priority == request.priority:
            return False
        request.priority = priority
        return True

    def _contended_step(self) -> ContendedStep | None:
        """The plan of a step in which a waiting request outranks a running prefill (see
        module), or None when none does. The step then runs short: every prefill in it
        at most `contended_chunk` tokens, the running prefills ranked below the best
        such waiting request held out but the first of them, and a token budget of the
        decodes, those prefills' chunks and the outranking requests' chunks."""
        prefills = [r for r in self.running if _prefilling(r)]
        seats = self.max_num_active_reqs - len(self.running)
        if not prefills or seats <= 0 or not self.waiting:
            return None
        last = max(_rank(r) for r in prefills)
        ahead_of_prefills: list[Request] = []
        for request in self.waiting:  # best first
            if len(ahead_of_prefills) >= seats or _rank(request) >= last:
                break
            ahead_of_prefills.append(request)
        if not ahead_of_prefills:
            return None
        chunk = self.contended_chunk
        cutoff = _rank(ahead_of_prefills[0])
        behind = sorted((r for r in prefills if _rank(r) >= cutoff), key=_rank)
        kept = [r for r in prefills if _rank(r) < cutoff] + behind[:1]
        decodes = len(self.running) - len(prefills)
        planned = sum(_chunk_of(r, chunk) for r in kept + ahead_of_prefills)
        budget = min(decodes + planned, self.max_num_scheduled_tokens)
        return ContendedStep(held=behind[1:], token_budget=budget, chunk=chunk)

    # The ledger

    def _charge(self, output: SchedulerOutput) -> None:
        now = time.time()
        for request_id, tokens in output.num_scheduled_tokens.items():
            entry = self._entries.get(request_id)
            request = self.requests.get(request_id)
            if entry is None or request is None:
                continue
            cached = 0
            if not entry.started:
                entry.started = True
                # What it had computed before its first step, the prefix cache gave.
                cached = max(0, request.num_computed_tokens - tokens)
                self.ledger.waited(entry.tenant, now, max(0.0, now - request.arrival_time))
            # Scheduled counters are already advanced: a step that reaches the end of
            # the request's tokens samples one.
            sampled = 1 if request.num_computed_tokens >= request.num_tokens else 0
            self.ledger.charge(
                entry.tenant, now, prompt=tokens - sampled, cached=cached, output=sampled
            )
            self._changed = True

    def _publish(self, at_once: bool = False) -> None:
        now = time.time()
        if self.shares_path is None or not self._changed:
            return
        if not at_once and now - self._published < PUBLISH_EVERY_S:
            return
        self._published, self._changed = now, False
        self.ledger.forget_idle(now)
        try:
            write_shares(self.shares_path, self.ledger.shares(now), now, self.step_clock.times())
        except OSError:
            self.shares_path = None  # its folder went away: the server is stopping


def _tenant_of(request: Request) -> tuple[str, float]:
    args = request.sampling_params.extra_args if request.sampling_params else None
    if not args:
        return UNNAMED, 1.0
    return str(args.get(TENANT_ARG, UNNAMED)), float(args.get(WEIGHT_ARG, 1.0))


def _prefilling(request: Request) -> bool:
    """Still computing its prompt (more than the one token a decode step computes), with
    nothing in flight (async scheduling's placeholders)."""
    return (
        request.num_tokens - request.num_computed_tokens > 1
        and request.num_output_placeholders == 0
    )


def _chunk_of(request: Request, chunk: int) -> int:
    return min(request.num_tokens - request.num_computed_tokens, chunk)


def _rank(request: Request) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


class SyncFairScheduler(FairShare, Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_fairness()


class AsyncFairScheduler(FairShare, AsyncScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_fairness()


class FairScheduler:
    """What vLLM's config names (`scheduler_cls`): the fair scheduler over vLLM's
    synchronous or asynchronous scheduler, whichever the config runs (asynchronous
    scheduling is decided after the engine arguments are)."""

    def __new__(cls, vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        base = (
            AsyncFairScheduler
            if vllm_config.scheduler_config.async_scheduling
            else SyncFairScheduler
        )
        return base(vllm_config, *args, **kwargs)
