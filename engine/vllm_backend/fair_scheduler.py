"""vLLM's scheduler with a fair share between tenants (engine.fairness), run in the
engine-core process (vLLM's `SchedulerConfig.scheduler_cls`).

Each request carries its tenant and weight in its sampling parameters' `extra_args`
(`tenant_args`). Before every step:

- each request's vLLM priority is set from its tier and its tenant's counter
  (`effective_priority`): the waiting queue runs the least-served tenant first, and
  when the KV cache runs short vLLM preempts the request with the largest priority,
  which is now the most-served tenant's (within the lowest tier);
- when the best waiting request's tenant has been served less than another tenant
  with prompt work pending, the step runs short (`_contended_step`): every prompt in
  it at most `contended_chunk` tokens, the other tenants' running prefills held out
  but one. vLLM gives running requests the step's token budget before any waiting
  one, so without this a heavy tenant's long prompts would fill every step, and a
  light tenant's first token would wait for steps of thousands of prompt tokens.
  Only requests vLLM can start now count (not one waiting for its grammar), and when
  a short step started none of the requests it was for, the next steps run whole:
  nobody's prefills are held for a request that cannot run.

After every step each scheduled request's tokens are charged to its tenant: the tokens
computed for its prompt, one output token when the step samples one, and on its first
step the prompt tokens the prefix cache served. Its output budget counts into the
counter when it first runs (up to `PREPAY_LIMIT` tokens); the output tokens it then
produces draw on that, and what it did not produce goes back when it ends.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from engine.fairness import (
    CONFIG_KEY,
    PREPAY_LIMIT,
    TENANT_ARG,
    UNNAMED,
    WEIGHT_ARG,
    ServiceCosts,
    ServiceLedger,
    StepClock,
    write_shares,
)

ACTIVE_SPAN = 1 << 6  # a counter's room for its tenant's running requests
COUNTER_LIMIT = 1 << 42  # weighted tokens; a server's lifetime of them fits
COUNTER_SPAN = COUNTER_LIMIT * ACTIVE_SPAN  # a tier's room in one priority integer
PUBLISH_EVERY_S = 1.0
# Prompt tokens a prefill may compute in a step where a less-served client's request
# waits: the step stays short, so that request's first token comes soon.
CONTENDED_CHUNK = 256
# Steps run whole after a contended step that started none of the requests it was for
# (the engine could not take them yet: no KV blocks free, output still in flight): the
# others' prefills are never held for a request that cannot run.
STALLED_STEPS = 8
# The waiting requests vLLM can start now; one waiting for its grammar or for remote
# KV blocks is passed over by vLLM's own loop.
READY = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def effective_priority(base: int, counter: float, running: int) -> int:
    """One integer for vLLM (lower runs sooner): the tier first, then the counter, then,
    between tenants level on their counters (one just back from idle is lifted level
    with the least served), the one with fewer requests running."""
    served = min(max(int(counter), 0), COUNTER_LIMIT - 1)
    return base * COUNTER_SPAN + served * ACTIVE_SPAN + min(max(running, 0), ACTIVE_SPAN - 1)


@dataclass(frozen=True, slots=True)
class ContendedStep:
    held: list[Request]  # running prefills that sit the step out
    token_budget: int
    chunk: int  # the most prompt tokens of one request in the step
    served: frozenset[str]  # the waiting requests the step is held for


@dataclass(slots=True)
class Entry:
    tenant: str
    base: int  # the priority the request came with (its tier and deferred offset)
    started: bool = False  # scheduled at least once (its queue wait is recorded)
    prepaid: int = 0  # output tokens counted into the tenant's counter, not yet produced


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
        self._whole_steps = 0  # steps left to run whole after a stalled contended one

    # vLLM's hooks

    def add_request(self, request: Request) -> None:
        if request.request_id not in self._entries:
            tenant, weight = _tenant_of(request)
            self._entries[request.request_id] = Entry(tenant, request.priority)
            self.ledger.arrive(tenant, weight)
            running = sum(1 for r in self.running if self._tenant(r) == tenant)
            request.priority = self._priority_of(request.priority, tenant, running)
        super().add_request(request)  # type: ignore[misc]

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        entry = self._entries.pop(request.request_id, None)
        if entry is not None:
            self.ledger.refund(entry.tenant, entry.prepaid)
            self.ledger.leave(entry.tenant, time.time())
            self._changed = True
        freed = super()._free_request(request, delay_free_blocks)  # type: ignore[misc]
        if not self._entries:  # the engine is idle now: no step will publish for a while
            self._publish(at_once=True)
        return freed

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self._reprioritize()
        # Decodes before prefills: vLLM gives the running requests the budget in list
        # order, and a long prompt ahead of a running request would take all of it, step
        # after step, stalling that request's next tokens until the prompt is done.
        self.running.sort(key=_prefilling)
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
            output = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            config.long_prefill_token_threshold = threshold
            self.max_num_scheduled_tokens = budget
            self.running.extend(step.held)
        if not step.served & output.num_scheduled_tokens.keys():
            self._whole_steps = STALLED_STEPS
        return output

    # The order

    def _reprioritize(self) -> None:
        """Each request's priority from its tenant's counter as it is now; the waiting
        queue re-ordered when any of its priorities moved."""
        moved = False
        running = Counter(self._tenant(r) for r in self.running)
        for request in self.running:
            self._refresh(request, running)
        for request in list(self.waiting):
            moved |= self._refresh(request, running)
        if moved:
            waiting = list(self.waiting)
            self.waiting.remove_requests(waiting)
            for request in waiting:
                self.waiting.add_request(request)

    def _refresh(self, request: Request, running: Counter[str]) -> bool:
        entry = self._entries.get(request.request_id)
        if entry is None:
            return False
        priority = self._priority_of(entry.base, entry.tenant, running[entry.tenant])
        if priority == request.priority:
            return False
        request.priority = priority
        return True

    def _priority_of(self, base: int, tenant: str, running: int) -> int:
        return effective_priority(base, self.ledger.counter(tenant), running)

    def _contended_step(self) -> ContendedStep | None:
        """The plan of a step in which the best waiting request's tenant has been served
        less than another tenant with prompt work pending (running prefills or waiting
        requests), or None. The step then runs short (see module): every prompt in it at
        most `contended_chunk` tokens; that tenant's waiting requests, the prefills
        ranked ahead of them and one chunk of the others' prompt work in the budget; the
        other running prefills held out."""
        if self._whole_steps > 0:
            self._whole_steps -= 1
            return None
        seats = self.max_num_active_reqs - len(self.running)
        if seats <= 0 or not self.waiting:
            return None
        waiting: list[Request] = []
        for request in self.waiting:  # best first
            if len(waiting) >= seats:
                break
            if request.status in READY:
                waiting.append(request)
        if not waiting:
            return None
        best = waiting[0]
        tenant = self._tenant(best)
        lightest = [r for r in waiting if self._tenant(r) == tenant]
        prefills = [r for r in self.running if _prefilling(r)]
        cutoff = _rank(best)
        ahead = [r for r in prefills if _rank(r) < cutoff]
        behind = sorted((r for r in prefills if _rank(r) >= cutoff), key=_rank)
        if not behind and len(lightest) == len(waiting):
            return None  # nobody else's prompt work waits: nothing to be fair about
        chunk = self.contended_chunk
        decodes = len(self.running) - len(prefills)
        first = decodes + sum(_chunk_of(r, chunk) for r in ahead + lightest)
        # One chunk of the others' prompt work goes on beside, where the step has room
        # for it after the lighter work: vLLM gives running prefills the budget first.
        others = _chunk_of(behind[0], chunk) if behind else chunk
        keep_one = first + others <= self.max_num_scheduled_tokens
        held = behind[1:] if keep_one else behind
        budget = min(first + (others if keep_one else 0), self.max_num_scheduled_tokens)
        served = frozenset(r.request_id for r in lightest)
        return ContendedStep(held=held, token_budget=budget, chunk=chunk, served=served)

    def _tenant(self, request: Request) -> str:
        entry = self._entries.get(request.request_id)
        return entry.tenant if entry is not None else UNNAMED

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
                entry.prepaid = min(max(request.max_tokens, 0), PREPAY_LIMIT)
                self.ledger.prepay(entry.tenant, entry.prepaid)
            # Scheduled counters are already advanced: the positions computed this step
            # below the prompt's end are prompt tokens, and a step that reaches the end
            # of the request's tokens samples an output token.
            after = request.num_computed_tokens
            prompt = max(0, min(request.num_prompt_tokens, after) - (after - tokens))
            sampled = 1 if after >= request.num_tokens else 0
            prepaid = min(sampled, entry.prepaid)
            entry.prepaid -= prepaid
            self.ledger.charge(
                entry.tenant, now, prompt=prompt, cached=cached, output=sampled, prepaid=prepaid
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
