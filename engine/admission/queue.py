"""Who runs next: a bounded queue with deadlines, priority, per-client fairness and a
token budget (pure: no clocks, no tasks; the runtime and the simulation drive it).

Order: lower `priority` first (as in vLLM: lower means sooner), then the client with
the fewest requests running (so one busy client cannot starve the others), then the
one with the fewest queued (a flood waits behind a client's single request), then
arrival. A request runs only if it fits both the concurrency cap and the KV token
budget; the head of the queue is never skipped, so a large request cannot be
starved by a stream of small ones. A request larger than the whole budget could never
run: it is refused at once (`NeverFits`), never queued.

A ticket is one engine request (one prompt with its `n` choices): a completion of 64
prompts is 64 tickets, and counts as 64 everywhere a client's share is counted.

Nobody can lock the others out:

- The queue is bounded by time (each ticket's deadline) and by `max_queued` in all. Its
  last quarter (`reserved_places`) is held back: a client may fill the rest alone, and
  fair share bites only when several clients wait (each may then hold
  `max_queued / clients waiting`); the held-back part takes only clients holding less
  than their part of it (`reserved / clients waiting`), so a client with nothing queued
  always finds room, even for a request of many prompts.
- The running side holds back an eighth of the concurrency cap and of the KV budget
  for clients with nothing running: a client already running something cannot take
  the last of either, so the next client's first request starts at once instead of
  waiting for a flood to finish. And a client's admitted prompts whose first output
  has not come yet are bounded (`prefill_budget`): the engine prefills in arrival
  order, and a wall of one client's long prompts would hold the next client's first
  token back however early admission let it in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from engine.admission.policy import Policy
from engine.checks import default_output_tokens, estimate_prompt_tokens
from engine.errors import AdmissionRejected, NeverFits

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
        self.kv_budget = kv_budget_tokens
        self.running: dict[int, Ticket] = {}
        self.waiting: list[Ticket] = []
        self.tokens_in_use = 0
        # Prompt tokens a client has admitted whose first output has not come yet: the
        # engine prefills them first come, so a client may keep at most `prefill_budget`
        # of them in flight (0: no bound) and cannot queue a wall of prefills in the
        # engine ahead of the next client's request.
        self.prefill_budget = 0
        self._prefilling: dict[int, Ticket] = {}
        self._prefill_by_client: Counter[str] = Counter()
        self._running_by_client: Counter[str] = Counter()
        self._waiting_by_client: Counter[str] = Counter()

    def offer(self, ticket: Ticket, cap: int) -> bool:
        """Admit `ticket` now (True), queue it (False), or raise AdmissionRejected.
        The caller rejects outright when the state admits nothing. A queued ticket may
        be admissible at once (it ranks ahead of the others and fits the capacity held
        back for it): the caller runs `admit_ready` next."""
        if 0 < self.kv_budget < ticket.tokens:
            raise NeverFits(ticket.tokens, self.kv_budget)
        if not self.waiting and self._fits(ticket, cap):
            self._start(ticket)
            return True
        self._check_room(ticket.client)
        self.waiting.append(ticket)
        self._waiting_by_client[ticket.client] += 1
        return False

    def prefilled(self, ticket_id: int) -> None:
        """The ticket's first output came: its prompt is no longer waiting to prefill."""
        ticket = self._prefilling.pop(ticket_id, None)
        if ticket is None:
            return
        self._prefill_by_client[ticket.client] -= ticket.prompt_tokens
        if self._prefill_by_client[ticket.client] <= 0:
            del self._prefill_by_client[ticket.client]

    def release(self, ticket_id: int) -> None:
        self.prefilled(ticket_id)
        ticket = self.running.pop(ticket_id, None)
        if ticket is None:
            return
        self.tokens_in_use -= ticket.tokens
        self._running_by_client[ticket.client] -= 1
        if self._running_by_client[ticket.client] <= 0:
            del self._running_by_client[ticket.client]

    def admit_ready(self, cap: int) -> list[Ticket]:
        """Move queued tickets to running, best first, while the next one fits. A client
        waiting on its own prefills steps aside for the others; the best of the rest is
        never skipped for lack of room."""
        started = []
        held: set[str] = set()  # clients whose admitted prompts have not begun yet
        while True:
            candidates = [t for t in self.waiting if t.client not in held]
            if not candidates:
                break
            best = min(candidates, key=self._rank)
            if self._prefill_full(best):
                held.add(best.client)
                continue
            if not self._fits(best, cap):
                break
            self._unqueue(best)
            self._start(best)
            started.append(best)
        return started

    def expire(self, now: float) -> list[Ticket]:
        """Drop queued tickets whose deadline passed."""
        expired = [t for t in self.waiting if t.deadline <= now]
        for ticket in expired:
            self._unqueue(ticket)
        return expired

    def withdraw(self, ticket_id: int) -> bool:
        """Remove a queued ticket (its client left, or its wait timed out)."""
        for ticket in self.waiting:
            if ticket.id == ticket_id:
                self._unqueue(ticket)
                return True
        return False

    def queued_by(self, client: str) -> int:
        return self._waiting_by_client[client]

    def prefill_pending(self, client: str) -> int:
        """Prompt tokens `client` has admitted whose first output has not come."""
        return self._prefill_by_client[client]

    def clear_waiting(self) -> list[Ticket]:
        dropped, self.waiting = self.waiting, []
        self._waiting_by_client.clear()
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

    def _rank(self, ticket: Ticket) -> tuple[int, int, int, float, int]:
        client = ticket.client
        running, queued = self._running_by_client[client], self._waiting_by_client[client]
        return (ticket.priority, running, queued, ticket.arrived, ticket.id)

    def _fits(self, ticket: Ticket, cap: int) -> bool:
        """Whether `ticket` can run now. A client already running something leaves the
        last eighth of the cap and of the KV budget to clients that run nothing, and
        waits while its admitted prompts not yet begun would exceed `prefill_budget`."""
        busy = self._running_by_client[ticket.client] > 0
        if len(self.running) >= (cap - cap // RUNNING_RESERVE_DIVISOR if busy else cap):
            return False
        if self._prefill_full(ticket):
            return False
        budget = self.kv_budget
        if budget <= 0:
            return True
        if busy:
            budget -= budget // RUNNING_RESERVE_DIVISOR
        return self.tokens_in_use + ticket.tokens <= budget

    def _prefill_full(self, ticket: Ticket) -> bool:
        pending = self._prefill_by_client[ticket.client]
        return bool(self.prefill_budget and pending) and (
            pending + ticket.prompt_tokens > self.prefill_budget
        )

    def _start(self, ticket: Ticket) -> None:
        self.running[ticket.id] = ticket
        if ticket.prompt_tokens:
            self._prefilling[ticket.id] = ticket
            self._prefill_by_client[ticket.client] += ticket.prompt_tokens
        self.tokens_in_use += ticket.tokens
        self._running_by_client[ticket.client] += 1

    def _unqueue(self, ticket: Ticket) -> None:
        self.waiting.remove(ticket)
        self._waiting_by_client[ticket.client] -= 1
        if self._waiting_by_client[ticket.client] <= 0:
            del self._waiting_by_client[ticket.client]
