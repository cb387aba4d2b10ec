"""The tickets waiting for admission: each queued request awaits a future, which a
grant resolves (the queue let it start) or a rejection fails (a drain, a timeout);
and each model's budget in the queue, taken from its engine when it first runs.

The controller (`engine.admission.runtime`) owns one `Waiters` and shares with it the
queue, the policy, its counters and its current caps.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from engine.admission import refusals
from engine.admission.policy import Policy
from engine.admission.queue import AdmissionQueue, Ticket
from engine.errors import AdmissionRejected
from engine.protocol import ModelInfo

PREFILL_CONTEXTS = 1  # a client's admitted prompts not yet begun: at most this many contexts


class Waiters:
    def __init__(
        self,
        queue: AdmissionQueue,
        policy: Policy,
        counters: Counter[str],
        caps: Callable[[], tuple[int, int]],
    ) -> None:
        self.queue = queue
        self.policy = policy
        self.counters = counters
        self._caps = caps  # (each model's cap, the cap on every model together)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._budgets_set: set[str] = set()  # models whose engine gave its KV budget

    def use_model(self, model: ModelInfo) -> None:
        """Take a model's KV budget from its engine once, when it first runs a request."""
        if model.name in self._budgets_set:
            return
        configured = self.policy.kv_budget_tokens
        # A context of prompts not yet begun per client: with chunked prefill, one or
        # a few engine steps' worth of prefill (a step's budget is 512 tokens on CPU).
        self.queue.set_model(
            model.name,
            configured if configured else model.kv_cache_tokens,
            PREFILL_CONTEXTS * model.max_model_len,
        )
        self._budgets_set.add(model.name)

    async def wait(self, ticket: Ticket) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[ticket.id] = waiter
        self.counters["queued"] += 1
        # Queued behind others, it may still run at once: a client running nothing may
        # take the capacity held back for it, and goes ahead of a flood's tickets.
        self.grant()
        try:
            # Not `wait_for`: on Python 3.11 it returns the result of a waiter granted in
            # the same instant its task is cancelled, swallowing the cancel; the request
            # then ran to its end with its client gone. A plain await always raises it.
            async with asyncio.timeout(self.policy.queue_timeout_s):
                await waiter
        except TimeoutError:
            self.queue.withdraw(ticket.id)
            self.count_rejection("queue_timeout")
            raise self.queue_timeout() from None
        except BaseException:
            # Client gone (cancelled) or rejected while queued: give back what it holds.
            self.queue.withdraw(ticket.id)
            self.queue.release(ticket.id)
            raise
        finally:
            self._waiters.pop(ticket.id, None)

    def grant(self) -> None:
        for ticket in self.queue.admit_ready(*self._caps()):
            waiter = self._waiters.get(ticket.id)
            if waiter is None or waiter.done():
                self.queue.release(ticket.id)  # its client gave up meanwhile
            else:
                waiter.set_result(None)

    def reject(self, ticket: Ticket, error: AdmissionRejected) -> None:
        waiter = self._waiters.get(ticket.id)
        if waiter is not None and not waiter.done():
            self.count_rejection(error.code)
            waiter.set_exception(error)

    def count_rejection(self, code: str) -> None:
        self.counters["rejected"] += 1
        self.counters[f"rejected_{code}"] += 1

    def queue_timeout(self) -> AdmissionRejected:
        return refusals.queue_timeout(self.policy)
