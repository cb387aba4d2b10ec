"""The admission queue with several models: each engine's own cap and KV budget, one
fair queue across them, no head-of-line blocking from one model to another."""

import itertools

import pytest

from engine.admission import deferred
from engine.admission.policy import Policy
from engine.admission.queue import AdmissionQueue, Ticket
from engine.errors import NeverFits

_ids = itertools.count(1)


def ticket(model: str, client: str = "a", tokens: int = 10, at: float = 0.0) -> Ticket:
    return Ticket(next(_ids), client, 0, tokens, at, at + 30.0, model=model)


def two_models(a_budget: int = 1000, b_budget: int = 1000) -> AdmissionQueue:
    q = AdmissionQueue(Policy())
    q.set_model("A", a_budget)
    q.set_model("B", b_budget)
    return q


def test_a_burst_for_one_model_leaves_the_others_budget_untouched() -> None:
    q = two_models()
    burst = [ticket("A", f"user{i}", tokens=100, at=float(i)) for i in range(40)]
    started = [t for t in burst if q.offer(t, cap=8)]
    assert len(started) == 8  # A's cap
    assert len(q.waiting) == 32
    assert (q.models["A"].running, q.models["A"].tokens_in_use) == (8, 800)
    assert (q.models["B"].running, q.models["B"].tokens_in_use) == (0, 0)
    late = ticket("B", "b", tokens=100, at=100.0)
    assert q.offer(late, cap=8) is True  # B has room: it runs at once, not behind A's 32
    assert q.models["B"].running == 1 and q.models["A"].running == 8


def test_a_model_full_on_its_kv_budget_does_not_block_another_models_queued_ticket() -> None:
    q = two_models(a_budget=300, b_budget=300)
    assert q.offer(ticket("A", "a", tokens=200), cap=8) is True
    assert q.offer(ticket("B", "b", tokens=200), cap=8) is True
    a_next = ticket("A", "c", tokens=200, at=1.0)  # earlier, ranks first
    b_next = ticket("B", "d", tokens=100, at=2.0)
    assert q.offer(a_next, cap=8) is False  # 400 > A's 300
    assert q.offer(b_next, cap=8) is True  # B's own queue is empty and 300 fits
    b_queued = ticket("B", "e", tokens=200, at=3.0)
    assert q.offer(b_queued, cap=8) is False  # over B's budget
    # B's first ticket ends: B's queued ticket runs although A's ranks ahead of it.
    (b_first,) = [t for t in q.running.values() if t.model == "B" and t.tokens == 200]
    q.release(b_first.id)
    assert q.admit_ready(cap=8) == [b_queued]
    assert q.waiting == [a_next]  # A's head still waits for A's room, not skipped


def test_within_one_model_the_head_is_never_skipped() -> None:
    q = two_models(a_budget=100)
    assert q.offer(ticket("A", "a", tokens=60), cap=8) is True
    big = ticket("A", "b", tokens=50, at=1.0)
    small = ticket("A", "c", tokens=10, at=2.0)
    assert q.offer(big, cap=8) is False
    assert q.offer(small, cap=8) is False  # would fit A, but waits behind A's head
    assert q.admit_ready(cap=8) == []


def test_each_model_is_judged_by_its_own_budget() -> None:
    q = two_models(a_budget=100, b_budget=5000)
    with pytest.raises(NeverFits):
        q.offer(ticket("A", tokens=1000), cap=8)  # larger than A's whole KV cache
    assert q.offer(ticket("B", tokens=1000), cap=8) is True  # B's is large enough


def test_two_keys_are_served_fairly_across_models() -> None:
    """A key flooding A and B does not push another key's tickets behind its own: the
    order is one queue across models, by each key's service counter (engine.fairness),
    and a key back from idle starts level with the flood."""
    q = two_models()
    for model in ("A", "B"):
        for _ in range(2):
            assert q.offer(ticket(model, "flood", tokens=10), cap=2) is True
    flood = [ticket(m, "flood", at=float(i)) for i, m in enumerate("ABAB" * 3)]
    for t in flood:
        assert q.offer(t, cap=2) is False
    victim_a = ticket("A", "victim", at=50.0)
    victim_b = ticket("B", "victim", at=51.0)
    assert q.offer(victim_a, cap=2) is False and q.offer(victim_b, cap=2) is False
    assert q.service.counter("victim") == q.service.counter("flood")  # level, no credit
    running_a = next(t for t in q.running.values() if t.model == "A")
    q.release(running_a.id)
    # A's freed slot goes to the victim (level with the flood, running nothing), not to
    # the flood's earlier tickets; its service now tops the flood's.
    assert q.admit_ready(cap=2) == [victim_a]
    assert q.service.counter("victim") > q.service.counter("flood")
    running_b = next(t for t in q.running.values() if t.model == "B")
    q.release(running_b.id)
    (next_b,) = q.admit_ready(cap=2)
    assert next_b.client == "flood"  # the less served key's turn on B
    q.release(next_b.id)
    q.release(next(t for t in q.running.values() if t.model == "B").id)
    # Two more of the flood's tickets on B bring it level again: the victim's turn.
    admitted = q.admit_ready(cap=2)
    assert victim_b in admitted


def test_the_running_reserve_is_per_model() -> None:
    """A client busy on A still finds B's last eighth open to its first request there."""
    q = two_models()
    for _ in range(7):
        assert q.offer(ticket("A", "a"), cap=8) is True
    assert q.offer(ticket("A", "a"), cap=8) is False  # A's last slot is for others
    q.withdraw(q.waiting[0].id)
    for _ in range(7):
        assert q.offer(ticket("B", "b"), cap=8) is True
    assert q.offer(ticket("B", "a"), cap=8) is True  # a runs nothing on B


def test_a_total_cap_bounds_every_model_together() -> None:
    q = two_models()
    assert q.offer(ticket("A", "a"), cap=2, total_cap=2) is True
    assert q.offer(ticket("B", "b"), cap=2, total_cap=2) is True
    waiting_b = ticket("B", "c")
    assert q.offer(waiting_b, cap=2, total_cap=2) is False  # B has room, the GPU not
    q.release(next(t.id for t in q.running.values() if t.model == "A"))
    assert q.admit_ready(cap=2, total_cap=2) == [waiting_b]


def test_prefill_bounds_are_per_model() -> None:
    q = AdmissionQueue(Policy())
    q.set_model("A", 0, prefill_budget=1000)
    q.set_model("B", 0, prefill_budget=1000)
    long_a = Ticket(next(_ids), "a", 0, 900, 0.0, 30.0, prompt_tokens=800, model="A")
    second_a = Ticket(next(_ids), "a", 0, 900, 1.0, 31.0, prompt_tokens=800, model="A")
    long_b = Ticket(next(_ids), "a", 0, 900, 2.0, 32.0, prompt_tokens=800, model="B")
    assert q.offer(long_a, cap=8) is True
    assert q.offer(second_a, cap=8) is False  # 1600 > 1000 pending on A
    assert q.offer(long_b, cap=8) is True  # B's engine prefills its own
    assert q.prefill_pending("a", "A") == 800 and q.prefill_pending("a", "B") == 800


def test_deferred_room_is_each_models_own() -> None:
    q = two_models()
    for i in range(10):
        q.offer(ticket("A", f"user{i}"), cap=8)
    assert q.models["A"].waiting == 2
    assert deferred.deferred_room(q, 8, 0, "A") == 0  # A has requests waiting
    assert deferred.deferred_room(q, 8, 0, "B") == 7  # B: its cap less an eighth
    assert deferred.deferred_room(q, 8, 0, None) == 7  # the most any model has
    assert deferred.interactive_waiting(q, "A") and not deferred.interactive_waiting(q, "B")
    assert deferred.interactive_waiting(q)
    assert deferred.interactive_running(q, "A") == 8 and deferred.interactive_running(q) == 8
    assert deferred.interactive_running(q, "B") == 0
