"""Who runs next: a bounded queue with deadlines, priority, per-client fairness and a
token budget (pure: no clocks, no tasks; the runtime and the simulation drive it).

Order: lower `priority` first (as in vLLM: lower means sooner), then the client with
the fewest requests running (so one busy client cannot starve the others), then
arrival. A request runs only if it fits both the concurrency cap and the KV token
budget; the head of the queue is never skipped, so a large request cannot be
starved by a stream of small ones. A request larger than the whole budget could never
run: it is refused at once (`NeverFits`), never queued.

The queue is bounded by time (each ticket's deadline) and by `max_queued` in all; a
client alone may fill it. Fair share bites only when several clients wait: each may
then hold `max_queued / clients waiting` of it, and a client over that is refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from engine.admission.policy import AdmissionRejected, Policy
from engine.checks import default_output_tokens
from engine.errors import EngineRequestError

CHARS_PER_TOKEN = 4  # a rough, tokenizer-free estimate: admission only needs the scale
TOKENS_PER_MESSAGE = 8  # role markers and separators the chat template adds


@dataclass(slots=True)
class Ticket:
    id: int
    client: str
    priority: int
    tokens: int  # KV tokens the request may occupy: prompt + output budget
    arrived: float
    deadline: float  # when waiting in the queue gives up


def estimate_tokens(
    messages: list[dict[str, Any]] | None,
    prompt: str | None,
    max_tokens: int | None,
    max_model_len: int,
    n: int = 1,
) -> int:
    """Prompt plus the output budget of each of `n` choices, in tokens, without
    tokenizing (the engine does that later). Without `max_tokens` a choice gets the
    model's default output budget (`engine.checks.default_output_tokens`), bounded by
    the rest of the context. The prompt's KV blocks are shared by the choices."""
    chars = len(prompt or "")
    for message in messages or ():
        chars += len(str(message.get("content") or "")) + TOKENS_PER_MESSAGE * CHARS_PER_TOKEN
    prompt_tokens = -(-chars // CHARS_PER_TOKEN)
    room = max(0, max_model_len - prompt_tokens)
    output = (
        max_tokens if max_tokens is not None else min(room, default_output_tokens(max_model_len))
    )
    return prompt_tokens + n * output


class NeverFits(EngineRequestError):
    """A request that needs more KV tokens than the whole budget: it could never run."""

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(
            f"This request may need about {tokens} tokens of KV cache (prompt plus `n` "
            f"times `max_tokens`), more than the server can ever hold ({budget}); lower "
            "`max_tokens` or `n`, or shorten the prompt.",
            param="max_tokens",
            code="request_too_large",
        )


class AdmissionQueue:
    def __init__(self, policy: Policy, kv_budget_tokens: int = 0) -> None:
        self.policy = policy
        self.kv_budget = kv_budget_tokens
        self.running: dict[int, Ticket] = {}
        self.waiting: list[Ticket] = []
        self.tokens_in_use = 0
        self._running_by_client: Counter[str] = Counter()
        self._waiting_by_client: Counter[str] = Counter()

    def offer(self, ticket: Ticket, cap: int) -> bool:
        """Admit `ticket` now (True), queue it (False), or raise AdmissionRejected.
        The caller rejects outright when the state admits nothing."""
        if 0 < self.kv_budget < ticket.tokens:
            raise NeverFits(ticket.tokens, self.kv_budget)
        if self._over_fair_share(ticket.client):
            raise AdmissionRejected(
                429,
                "over_fair_share",
                "This client already has its fair share of requests queued; retry later.",
                retry_after_s=1.0,
            )
        if not self.waiting and self._fits(ticket, cap):
            self._start(ticket)
            return True
        if len(self.waiting) >= self.policy.max_queued:
            raise AdmissionRejected(
                503, "queue_full", "The server is at capacity; retry later.", retry_after_s=1.0
            )
        self.waiting.append(ticket)
        self._waiting_by_client[ticket.client] += 1
        return False

    def release(self, ticket_id: int) -> None:
        ticket = self.running.pop(ticket_id, None)
        if ticket is None:
            return
        self.tokens_in_use -= ticket.tokens
        self._running_by_client[ticket.client] -= 1
        if self._running_by_client[ticket.client] <= 0:
            del self._running_by_client[ticket.client]

    def admit_ready(self, cap: int) -> list[Ticket]:
        """Move queued tickets to running, best first, while the next one fits."""
        started = []
        while self.waiting:
            best = min(self.waiting, key=self._rank)
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

    def clear_waiting(self) -> list[Ticket]:
        dropped, self.waiting = self.waiting, []
        self._waiting_by_client.clear()
        return dropped

    def _over_fair_share(self, client: str) -> bool:
        """Whether `client` holds its share of the queue already: none while no one else
        waits (the queue is all its own), an equal part of it while others do."""
        held = self._waiting_by_client[client]
        others = len(self._waiting_by_client) - (held > 0)
        if others == 0:
            return False
        return held >= max(1, self.policy.max_queued // (others + 1))

    def _rank(self, ticket: Ticket) -> tuple[int, int, float, int]:
        return (ticket.priority, self._running_by_client[ticket.client], ticket.arrived, ticket.id)

    def _fits(self, ticket: Ticket, cap: int) -> bool:
        if len(self.running) >= cap:
            return False
        if self.kv_budget <= 0:
            return True
        return self.tokens_in_use + ticket.tokens <= self.kv_budget

    def _start(self, ticket: Ticket) -> None:
        self.running[ticket.id] = ticket
        self.tokens_in_use += ticket.tokens
        self._running_by_client[ticket.client] += 1

    def _unqueue(self, ticket: Ticket) -> None:
        self.waiting.remove(ticket)
        self._waiting_by_client[ticket.client] -= 1
        if self._waiting_by_client[ticket.client] <= 0:
            del self._waiting_by_client[ticket.client]
