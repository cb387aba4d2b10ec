"""Who runs next: a bounded queue with deadlines, priority, per-client fairness and a
token budget per model (pure: no clocks, no tasks; the runtime and the simulation
drive it).

One queue holds every model's waiting tickets, and the order is across them; the
running side is counted per model (`ModelLoad`): each engine has its own concurrency
cap and KV budget, and a ticket is admitted against its own model's only. A model
whose best ticket does not fit waits, and the others go on: a burst for one model
never holds back a request for another that has room.

Order: lower `priority` first (as in vLLM: lower means sooner), then a client running
nothing before one running something, then the client the engine has served least
(its service counter, engine.fairness: each request's prompt and whole output budget
as it is admitted, divided by its weight; a client back from idle starts level with
the least served active one), then the one with the fewest requests running, then the
fewest queued (a flood waits behind a client's single request), then
arrival. A request runs only if it fits both its model's concurrency cap and KV token
budget; a model's best ticket is never skipped for another of the same model, so a
large request cannot be starved by a stream of small ones. A request larger than its
model's whole budget could never run: it is refused at once (`NeverFits`), never queued.

A ticket is one engine request (one prompt with its `n` choices): a completion of 64
prompts is 64 tickets, and counts as 64 everywhere a client's share is counted.

Nobody can lock the others out:

- The queue is bounded by time (each ticket's deadline) and by `max_queued` in all. Its
  last quarter (`reserved_places`) is held back: a client may fill the rest alone, and
  fair share bites only when several clients wait (each may then hold
  `max_queued / clients waiting`); the held-back part takes only clients holding less
  than their part of it (`reserved / clients waiting`), so a client with nothing queued
  always finds room, even for a request of many prompts.
- The running side holds back an eighth of each model's concurrency cap and KV budget
  for clients with nothing running on that model: a client already running something cannot take
  the last of either, so the next client's first request starts at once instead of
  waiting for a flood to finish. And a client's admitted prompts whose first output
  has not come yet are bounded (`prefill_budget`): the engine prefills in arrival
  order, and a wall of one client's long prompts would hold the next client's first
  token back however early admission let it in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from engine.admission.policy import Policy
from engine.checks import default_output_tokens, estimate_prompt_tokens
from engine.errors import AdmissionRejected, NeverFits
from engine.fairness import ServiceLedger

QUEUE_RESERVE_DIVISOR = 4  # a quarter of the queue is held for clients short of their part
RUNNING_RESERVE_DIVISOR = 8  # an eighth of the cap and the KV budget: for idle clients


def reserved_places(max_queued: int) -> int:
    """Queue places held for clients with less than their part of them (a quarter,
    rounded up: at least one whenever there is a queue)."""
    return -(-max_queued // QUEUE_RESERVE_DIVISOR)


@dataclass(slots=True)
class Ticket:
    id: int
    client: str
    priority: int
    tokens: int  # KV tokens the request may occupy: prompt + output budget
    arrived: float
    deadline: float  # when waiting in the queue gives up
    prompt_tokens: int = 0  # of `tokens`, the prompt: prefill work until its first output
    model: str = ""  # the served model (its engine) whose budget it runs against
    weight: float = 1.0  # its client's share against other clients' (engine.fairness)


@dataclass(slots=True)
class ModelLoad:
    """One model's engine: its limits (None: the queue's defaults) and what runs on it."""

    kv_budget: int | None = None  # KV tokens; 0 or less: unbounded
    prefill_budget: int | None = None
    running: int = 0
    tokens_in_use: int = 0
    waiting: int = 0
    by_client: Counter[str] = field(default_factory=Counter)  # running, per client


def estimate_tokens(
    messages: list[dict[str, Any]] | None,
    prompt: str | None,
    max_tokens: int | None,
    max_model_len: int,
    n: int = 1,
    prompt_token_ids: int = 0,
) -> int:
    """Prompt plus the output budget of each of `n` choices, in tokens, without
    tokenizing (the engine does that later). Without `max_tokens` a choice gets the
    model's default output budget (`engine.checks.default_output_tokens`), bounded by
    the rest of the context. The prompt's KV blocks are shared by the choices. A
    pre-tokenized prompt counts its `prompt_token_ids` tokens as they are."""
    messages = messages or []
    chars = len(prompt or "") + sum(len(str(m.get("content") or "")) for m in messages)
    prompt_tokens = estimate_prompt_tokens(chars, len(messages), prompt_token_ids)
    room = max(0, max_model_len - prompt_tokens)
    output = (
        max_tokens if max_tokens is not None else min(room, default_output_tokens(max_model_len))
    )
    return prompt_tokens + n * output


class AdmissionQueue:
    def __init__(self, policy: Policy, kv_budget_tokens: int = 0) -> None:
        self.policy = policy
        # The defaults of a model without its own (`set_model`).
        self.kv_budget = kv_budget_tokens
        # Prompt tokens a client has admitted on a model whose first output has not come
        # yet: the engine prefills them first come, so a client may keep at most
        # `prefill_budget` of them in flight per model (0: no bound) and cannot queue a
        # wall of prefills in the engine ahead of the next client's request.
        self.prefill_budget = 0
        self.running: dict[int, Ticket] = {}
        self.waiting: list[Ticket] = []
        self.models: dict[str, ModelLoad] = {}
        self._prefilling: dict[int, Ticket] = {}
        self._prefill_by_client: Counter[tuple[str, str]] = Counter()
        # Each client's service so far (engine.fairness): the least served ranks first.
        self.service = ServiceLedger()
        self.now = 0.0  # the runtime's clock, for the ledger's last-minute shares
        self._running_by_client: Counter[str] = Counter()
        self._waiting_by_client: Counter[str] = Counter()

    def set_model(self, model: str, kv_budget: int, prefill_budget: int = 0) -> None:
        """Give `model`'s engine its own KV budget (0: unbounded) and prefill bound."""
        load = self.load(model)
        load.kv_budget, load.prefill_budget = kv_budget, prefill_budget

    def load(self, model: str) -> ModelLoad:
        load = self.models.get(model)
        if load is None:
            load = self.models[model] = ModelLoad()
        return load

    def budget_of(self, model: str) -> int:
        """`model`'s KV budget in tokens (0 or less: unbounded)."""
        load = self.models.get(model)
        return self.kv_budget if load is None or load.kv_budget is None else load.kv_budget

    def _prefill_budget_of(self, model: str) -> int:
        load = self.models.get(model)
        budget = None if load is None else load.prefill_budget
        return self.prefill_budget if budget is None else budget

    @property
    def tokens_in_use(self) -> int:
        return sum(load.tokens_in_use for load in self.models.values())

    def offer(self, ticket: Ticket, cap: int, total_cap: int = 0) -> bool:
        """Admit `ticket` now (True), queue it (False), or raise AdmissionRejected.
        `cap` bounds each model's running tickets, `total_cap` (0: none) all of them.
        The caller rejects outright when the state admits nothing. A queued ticket may
        be admissible at once (it ranks ahead of the others and fits the capacity held
        back for it): the caller runs `admit_ready` next."""
        load = self.models.get(ticket.model) or self.load(ticket.model)
        budget = self.kv_budget if load.kv_budget is None else load.kv_budget
        if 0 < budget < ticket.tokens:
            raise NeverFits(ticket.tokens, budget)
        # Another model's waiting tickets wait for their own engine's room, not this one.
        if not load.waiting and self._fits(ticket, cap, total_cap, load):
            self.service.arrive(ticket.client, ticket.weight)
            self._start(ticket)
            return True
        self._check_room(ticket.client)
        self.service.arrive(ticket.client, ticket.weight)
        self.waiting.append(ticket)
        self._waiting_by_client[ticket.client] += 1
        load.waiting += 1
        return False

    def prefilled(self, ticket_id: int) -> None:
        """The ticket's first output came: its prompt is no longer waiting to prefill."""
        ticket = self._prefilling.pop(ticket_id, None)
        if ticket is None:
            return
        key = (ticket.client, ticket.model)
        self._prefill_by_client[key] -= ticket.prompt_tokens
        if self._prefill_by_client[key] <= 0:
            del self._prefill_by_client[key]

    def release(self, ticket_id: int) -> None:
        if self._prefilling:
            self.prefilled(ticket_id)
        ticket = self.running.pop(ticket_id, None)
        if ticket is None:
            return
        self.service.leave(ticket.client, self.now)
        load = self.models[ticket.model]
        load.running -= 1
        load.tokens_in_use -= ticket.tokens
        _decrement(load.by_client, ticket.client)
        _decrement(self._running_by_client, ticket.client)

    def admit_ready(self, cap: int, total_cap: int = 0) -> list[Ticket]:
        """Move queued tickets to running, best first, while the next one fits. A client
        waiting on its own prefills on a model steps aside for the others; a model whose
        best ticket lacks room stops there (its best is never skipped) while the other
        models go on; a full `total_cap` stops all."""
        started = []
        held: set[tuple[str, str]] = set()  # (client, model): admitted prompts not begun
        full: set[str] = set()  # models whose best ticket does not fit
        while True:
            candidates = [
                t for t in self.waiting if t.model not in full and (t.client, t.model) not in held
            ]
            if not candidates:
                break
            best = min(candidates, key=self._rank)
            if self._prefill_full(best):
                held.add((best.client, best.model))
                continue
            if 0 < total_cap <= len(self.running):
                break
            if not self._fits(best, cap, total_cap):
                full.add(best.model)
                continue
            self._unqueue(best)
            self._start(best)
            started.append(best)
        return started

    def expire(self, now: float) -> list[Ticket]:
        """Drop queued tickets whose deadline passed."""
        self.service.forget_idle(now)
        expired = [t for t in self.waiting if t.deadline <= now]
        for ticket in expired:
            self._unqueue(ticket)
            self.service.leave(ticket.client, now)
        return expired

    def withdraw(self, ticket_id: int) -> bool:
        """Remove a queued ticket (its client left, or its wait timed out)."""
        for ticket in self.waiting:
            if ticket.id == ticket_id:
                self._unqueue(ticket)
                self.service.leave(ticket.client, self.now)
                return True
        return False

    def queued_by(self, client: str) -> int:
        return self._waiting_by_client[client]

    def prefilling(self) -> list[Ticket]:
        """The running tickets whose first output has not come yet."""
        return list(self._prefilling.values())

    def prefill_pending(self, client: str, model: str = "") -> int:
        """Prompt tokens `client` has admitted on `model` whose first output has not come."""
        return self._prefill_by_client[(client, model)]

    def clear_waiting(self) -> list[Ticket]:
        dropped, self.waiting = self.waiting, []
        for ticket in dropped:
            self.service.leave(ticket.client, self.now)
        self._waiting_by_client.clear()
        for load in self.models.values():
            load.waiting = 0
        return dropped

    def _check_room(self, client: str) -> None:
        """Raise unless `client` may queue one more ticket. The open part of the queue
        (all but `reserved_places`) is the whole queue's to share: a client alone may
        fill it, and while others wait each holds at most an equal share. The held-back
        part takes a client only while it holds less than an equal part of that part,
        so whoever has nothing queued always gets in."""
        limit = self.policy.max_queued
        held = self._waiting_by_client[client]
        clients = len(self._waiting_by_client) + (held == 0)  # this one included
        total = len(self.waiting)
        if total < limit - reserved_places(limit):
            if clients > 1 and held >= max(1, limit // clients):
                raise self._over_share()
            return
        if total < limit and held < max(1, reserved_places(limit) // clients):
            return
        if clients > 1 and total < limit:
            raise self._over_share()
        raise AdmissionRejected(
            503, "queue_full", "The server is at capacity; retry later.", retry_after_s=1.0
        )

    @staticmethod
    def _over_share() -> AdmissionRejected:
        return AdmissionRejected(
            429,
            "over_fair_share",
            "This client already has its fair share of requests queued; retry later.",
            retry_after_s=1.0,
        )

    def _rank(self, ticket: Ticket) -> tuple[int, bool, float, int, int, float, int]:
        client = ticket.client
        running, queued = self._running_by_client[client], self._waiting_by_client[client]
        served = self.service.counter(client)
        # A client running nothing goes first: its counter is charged for each request as
        # it starts, while a long generation's budget was charged once, so between its
        # requests a light client can sit a few tokens above a client whose running work
        # will take minutes more.
        return (ticket.priority, running > 0, served, running, queued, ticket.arrived, ticket.id)

    def _fits(
        self, ticket: Ticket, cap: int, total_cap: int = 0, load: ModelLoad | None = None
    ) -> bool:
        """Whether `ticket` can run now on its model. A client already running something
        there leaves the last eighth of the model's cap and KV budget to clients that
        run nothing there, and waits while its admitted prompts not yet begun would
        exceed the model's prefill budget. `total_cap` (0: none) bounds every model's."""
        load = load or self.load(ticket.model)
        busy = load.by_client.get(ticket.client, 0) > 0
        if load.running >= (cap - cap // RUNNING_RESERVE_DIVISOR if busy else cap):
            return False
        if 0 < total_cap <= len(self.running):
            return False
        if self._prefill_by_client and self._prefill_full(ticket, load):
            return False
        budget = self.kv_budget if load.kv_budget is None else load.kv_budget
        if budget <= 0:
            return True
        if busy:
            budget -= budget // RUNNING_RESERVE_DIVISOR
        return load.tokens_in_use + ticket.tokens <= budget

    def _prefill_full(self, ticket: Ticket, load: ModelLoad | None = None) -> bool:
        pending = self._prefill_by_client.get((ticket.client, ticket.model), 0)
        if not pending:
            return False
        if load is None:
            budget = self._prefill_budget_of(ticket.model)
        else:
            budget = self.prefill_budget if load.prefill_budget is None else load.prefill_budget
        return bool(budget) and pending + ticket.prompt_tokens > budget

    def _start(self, ticket: Ticket) -> None:
        # The whole of what it may take, as it starts: a long generation weighs on its
        # client's rank while it runs, not only once it ends. Nothing is given back when
        # it uses less (a budget given back later would drop a client below others that
        # were lifted level with it meanwhile); the engine's own counters are exact.
        output_budget = ticket.tokens - ticket.prompt_tokens
        self.service.charge(
            ticket.client, self.now, prompt=ticket.prompt_tokens, output=output_budget
        )
        self.running[ticket.id] = ticket
        if ticket.prompt_tokens:
            self._prefilling[ticket.id] = ticket
            self._prefill_by_client[(ticket.client, ticket.model)] += ticket.prompt_tokens
        load = self.models[ticket.model]
        load.running += 1
        load.tokens_in_use += ticket.tokens
        client = ticket.client
        load.by_client[client] = load.by_client.get(client, 0) + 1
        self._running_by_client[client] = self._running_by_client.get(client, 0) + 1

    def _unqueue(self, ticket: Ticket) -> None:
        self.waiting.remove(ticket)
        self.load(ticket.model).waiting -= 1
        _decrement(self._waiting_by_client, ticket.client)


def _decrement(counts: Counter[str], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left <= 0:
        counts.pop(key, None)
    else:
        counts[key] = left
