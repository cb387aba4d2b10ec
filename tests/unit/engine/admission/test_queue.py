"""The admission queue: caps, token budget, priority, fairness, deadlines, rejections."""

import itertools
import random

import pytest

from engine.admission.policy import Policy
from engine.admission.queue import (
    AdmissionQueue,
    Ticket,
    estimate_tokens,
    reserved_places,
)
from engine.errors import AdmissionRejected, NeverFits
from engine.fairness import OUTPUT_TOKEN_COST

_ids = itertools.count(1)


def ticket(client: str = "a", priority: int = 0, tokens: int = 10, at: float = 0.0) -> Ticket:
    return Ticket(next(_ids), client, priority, tokens, at, at + 30.0)


def queue(**policy: object) -> AdmissionQueue:
    budget = int(policy.pop("kv_budget", 0))  # type: ignore[call-overload]
    return AdmissionQueue(Policy(**policy), kv_budget_tokens=budget)  # type: ignore[arg-type]


def test_admits_up_to_the_cap_then_queues() -> None:
    q = queue(max_concurrent=2)
    assert q.offer(ticket(), cap=2) is True
    assert q.offer(ticket(), cap=2) is True
    third = ticket()
    assert q.offer(third, cap=2) is False
    assert q.admit_ready(cap=2) == []
    q.release(next(iter(q.running)))
    assert q.admit_ready(cap=2) == [third]


def test_a_client_alone_may_fill_the_queue_but_its_held_back_part() -> None:
    q = queue(max_queued=8)  # 2 places held back
    assert reserved_places(8) == 2
    assert q.offer(ticket("a"), cap=1) is True
    for _ in range(6):
        assert q.offer(ticket("a"), cap=1) is False
    with pytest.raises(AdmissionRejected) as full:
        q.offer(ticket("a"), cap=1)
    assert (full.value.status, full.value.code) == (503, "queue_full")


def test_fair_share_bites_once_another_client_waits() -> None:
    q = queue(max_queued=16)  # 12 open places, 4 held back
    q.offer(ticket("a"), cap=1)  # runs
    for _ in range(6):
        q.offer(ticket("a"), cap=1)  # a alone: the open part is its own
    q.offer(ticket("b"), cap=1)  # b waits: a's share is now 16 / 2 = 8
    q.offer(ticket("a"), cap=1)
    q.offer(ticket("a"), cap=1)  # a holds 8
    with pytest.raises(AdmissionRejected) as over_share:
        q.offer(ticket("a"), cap=1)
    assert (over_share.value.status, over_share.value.code) == (429, "over_fair_share")
    for _ in range(3):
        q.offer(ticket("b"), cap=1)  # b is within its share: 12 queued, the open part full
    q.offer(ticket("c"), cap=1)  # c, with nothing queued, takes a held-back place
    with pytest.raises(AdmissionRejected) as over_share:
        q.offer(ticket("b"), cap=1)  # b holds more than its part of the held-back places
    assert over_share.value.code == "over_fair_share"


def test_a_flood_never_turns_a_newcomers_first_request_away() -> None:
    """One client fills all it may; another's first request, even one of many
    prompts (a ticket each), still queues, and goes first."""
    q = queue(max_queued=1024)
    assert q.offer(ticket("flood"), cap=1) is True
    refused = 0
    for i in range(2000):
        try:
            q.offer(ticket("flood", at=float(i)), cap=1)
        except AdmissionRejected:
            refused += 1
    assert len(q.waiting) == 1024 - 256 and refused == 2000 - 768
    prompts = [ticket("victim", at=5000.0) for _ in range(64)]
    for t in prompts:
        assert q.offer(t, cap=1) is False  # queued, never refused
    q.release(next(iter(q.running)))
    assert q.admit_ready(cap=1) == [prompts[0]]  # nothing running: ahead of the flood


def test_a_client_with_nothing_queued_always_gets_in() -> None:
    """Random floods by several clients, random departures: whenever a client holds
    nothing queued, its next ticket is queued (or runs), never refused."""
    rng = random.Random(5)
    q = queue(max_queued=64)
    clients = ["a", "b", "c", "d", "e"]
    refused = 0
    for step in range(20_000):
        client = rng.choice(clients)
        had_nothing = client not in {t.client for t in q.waiting}
        try:
            q.offer(ticket(client, at=float(step)), cap=4)
        except AdmissionRejected:
            refused += 1
            assert not had_nothing, f"step {step}: {client} refused with nothing queued"
        if rng.random() < 0.3 and q.running:
            q.release(rng.choice(list(q.running)))
            q.admit_ready(cap=4)
        if rng.random() < 0.05 and q.waiting:
            q.withdraw(rng.choice(q.waiting).id)
    assert refused > 1000  # the queue was full most of the time: the rule was exercised


def test_a_busy_client_leaves_the_last_running_places_to_others() -> None:
    q = queue()  # an eighth of the cap held back: 1 of 8
    for _ in range(7):
        assert q.offer(ticket("a"), cap=8) is True
    assert q.offer(ticket("a"), cap=8) is False  # the last slot is not a's to take
    newcomer = ticket("b", at=1.0)
    assert q.offer(newcomer, cap=8) is False  # queued behind a's ticket ...
    assert q.admit_ready(cap=8) == [newcomer]  # ... and admitted at once: b runs nothing
    assert q.admit_ready(cap=8) == []  # a's eighth still waits


def test_a_busy_client_leaves_the_last_of_the_kv_budget_to_others() -> None:
    q = queue(kv_budget=800)  # an eighth held back: 100 tokens
    assert q.offer(ticket("a", tokens=50), cap=8) is True
    big = ticket("a", tokens=700, at=1.0)
    assert q.offer(big, cap=8) is False  # 750 > 800 - 100 for a client running something
    small = ticket("b", tokens=50, at=2.0)
    assert q.offer(small, cap=8) is False
    assert q.admit_ready(cap=8) == [small]  # b runs nothing: it may use the held-back part
    assert q.tokens_in_use == 100


def test_lower_priority_value_goes_first() -> None:
    q = queue()
    q.offer(ticket(), cap=1)
    late_urgent = ticket("b", priority=-1, at=2.0)
    early_normal = ticket("c", priority=0, at=1.0)
    q.offer(early_normal, cap=1)
    q.offer(late_urgent, cap=1)
    q.release(next(iter(q.running)))
    assert q.admit_ready(cap=1) == [late_urgent]


def test_a_busy_client_does_not_starve_others() -> None:
    """Client a runs two and floods the queue first; b's one request still goes next."""
    q = queue()
    running = [ticket("a"), ticket("a")]
    for t in running:
        assert q.offer(t, cap=2) is True
    flood = [ticket("a", at=1.0 + i) for i in range(5)]
    for t in flood:
        q.offer(t, cap=2)
    lone_b = ticket("b", at=10.0)
    q.offer(lone_b, cap=2)
    q.release(running[0].id)
    # a still has one running, b none: b beats a's older requests.
    assert q.admit_ready(cap=2) == [lone_b]
    q.release(running[1].id)
    # b has one running now, a none: a's oldest is next.
    assert q.admit_ready(cap=2) == [flood[0]]


def test_token_budget_limits_admission_and_the_head_is_not_skipped() -> None:
    q = queue(kv_budget=100)
    q.offer(ticket(tokens=60), cap=10)
    big = ticket(tokens=50, at=1.0)
    small = ticket(tokens=10, at=2.0)
    assert q.offer(big, cap=10) is False  # 60 + 50 > 100
    assert q.offer(small, cap=10) is False  # would fit, but waits behind the head
    assert q.admit_ready(cap=10) == []
    q.release(next(iter(q.running)))
    assert q.admit_ready(cap=10) == [big, small]
    assert q.tokens_in_use == 60


def test_a_request_larger_than_the_budget_is_refused_at_once() -> None:
    q = queue(kv_budget=100)
    with pytest.raises(NeverFits) as refused:
        q.offer(ticket(tokens=500), cap=10)
    assert (refused.value.param, refused.value.code) == ("max_tokens", "request_too_large")
    assert q.waiting == [] and q.running == {}
    assert q.offer(ticket(tokens=100), cap=10) is True  # the whole budget still fits


def test_expired_tickets_leave_the_queue() -> None:
    q = queue()
    q.offer(ticket(), cap=1)
    stale = ticket(at=0.0)
    fresh = ticket(at=20.0)
    q.offer(stale, cap=1)
    q.offer(fresh, cap=1)
    assert q.expire(now=30.0) == [stale]
    assert q.waiting == [fresh]


def test_cap_zero_queues_everything() -> None:
    q = queue()
    assert q.offer(ticket(), cap=0) is False
    assert q.admit_ready(cap=1) != []


def test_estimate_tokens() -> None:
    messages = [{"role": "user", "content": "x" * 400}]
    assert estimate_tokens(messages, None, 50, 2048) == 100 + 8 + 50
    # Without max_tokens a choice gets the model's default (a quarter of the context)...
    assert estimate_tokens(messages, None, None, 2048) == 108 + 512
    assert estimate_tokens(messages, None, None, 2048, n=4) == 108 + 4 * 512
    # ... bounded by the rest of the context.
    assert estimate_tokens([{"role": "user", "content": "x" * 7800}], None, None, 2048) == 2048
    assert estimate_tokens(None, "abcd" * 10, 5, 2048) == 15
    assert estimate_tokens(None, "abcd" * 10, 5, 2048, n=3) == 25  # the prompt is shared
    # A pre-tokenized prompt counts its tokens (it has no text to measure).
    assert estimate_tokens(None, None, 5, 2048, prompt_token_ids=1000) == 1005


def test_a_client_keeps_a_bounded_amount_of_prompts_waiting_to_prefill() -> None:
    """Admitted prompts whose first output has not come count against the client's
    prefill budget; each first output gives its prompt back. Another client, with
    nothing waiting to prefill, is not held back."""
    q = queue()
    q.prefill_budget = 1000

    def long(client: str, at: float) -> Ticket:
        return Ticket(next(_ids), client, 0, 700, at, at + 30.0, prompt_tokens=600)

    first, second = long("a", 0.0), long("a", 1.0)
    assert q.offer(first, cap=10) is True  # a lone prompt over nothing pending: runs
    assert q.offer(second, cap=10) is False  # 600 + 600 > 1000: waits
    other = long("b", 2.0)
    assert q.offer(other, cap=10) is False
    assert q.admit_ready(cap=10) == [other]  # b has nothing waiting to prefill
    q.prefilled(first.id)  # a's first output came
    assert q.admit_ready(cap=10) == [second]
    q.release(second.id)  # released before any output: its prompt is given back too
    q.release(first.id)
    q.release(other.id)
    assert q.offer(long("a", 3.0), cap=10) is True


def test_a_client_waiting_on_its_prefills_steps_aside() -> None:
    """The best-ranked ticket's client is held back by its own prefills: the next
    client's ticket goes ahead instead of waiting behind it."""
    q = queue()
    q.prefill_budget = 1000
    flood = Ticket(next(_ids), "flood", 0, 700, 0.0, 30.0, prompt_tokens=600)
    assert q.offer(flood, cap=10) is True
    victim_running = [ticket("victim", tokens=10) for _ in range(3)]
    for t in victim_running:
        assert q.offer(t, cap=10) is True  # the queue is empty: they run
    queued_flood = Ticket(next(_ids), "flood", 0, 700, 1.0, 31.0, prompt_tokens=600)
    assert q.offer(queued_flood, cap=10) is False  # over its prefill budget
    victim_next = ticket("victim", tokens=10, at=2.0)
    assert q.offer(victim_next, cap=10) is False  # the queue is not empty: it queues
    # The flood runs 1, the victim 3: the flood's ticket ranks first, but waits on its
    # prefill; the victim's goes ahead.
    assert q.admit_ready(cap=10) == [victim_next]
    q.prefilled(flood.id)
    assert q.admit_ready(cap=10) == [queued_flood]


def prompt_ticket(client: str, prompt: int, weight: float = 1.0) -> Ticket:
    return Ticket(next(_ids), client, 0, prompt, 0.0, 30.0, prompt, "", weight)


def test_the_least_served_client_goes_first_whatever_its_counts() -> None:
    q = queue(max_concurrent=4)
    q.offer(prompt_ticket("light", 10), cap=4)  # runs: 10 prompt tokens of service
    q.offer(prompt_ticket("heavy", 1000), cap=4)  # runs: level with light, then 1000 more
    q.offer(prompt_ticket("heavy", 10), cap=4)
    q.offer(prompt_ticket("light", 10), cap=4)  # four running: two each
    heavy_next = prompt_ticket("heavy", 10)
    light_next = prompt_ticket("light", 10)
    assert q.offer(heavy_next, cap=4) is False  # queued first
    assert q.offer(light_next, cap=4) is False
    # One running and one queued each: the counts tie, the service does not.
    q.release(next(t.id for t in q.running.values() if t.client == "heavy"))
    q.release(next(t.id for t in q.running.values() if t.client == "light"))
    assert q.admit_ready(cap=4)[0] is light_next


def test_the_output_budget_counts_as_a_ticket_starts_divided_by_the_weight() -> None:
    q = queue(max_concurrent=4)
    first = Ticket(next(_ids), "a", 0, 10 + 100, 0.0, 30.0, 10, "", 1.0)
    second = Ticket(next(_ids), "b", 0, 10 + 100, 0.0, 30.0, 10, "", 2.0)
    q.offer(first, cap=4)
    cost = 10 + OUTPUT_TOKEN_COST * 100
    assert q.service.counter("a") == pytest.approx(cost)
    q.offer(second, cap=4)
    # b came while a was active, level with a's counter then; its own counts half.
    assert q.service.counter("b") == pytest.approx(cost + cost / 2)


def test_a_long_generation_running_ranks_its_client_behind_a_short_ones() -> None:
    q = queue(kv_budget=1000)
    done = Ticket(next(_ids), "victim", 0, 49, 0.0, 300.0, 41, "m")
    q.offer(done, cap=64)
    q.release(done.id)
    huge = [Ticket(next(_ids), "attacker", 0, 900, 1.0, 300.0, 35, "m") for _ in range(3)]
    for ticket in huge:
        q.offer(ticket, cap=64)  # the first runs, the others wait for the KV budget
    victim = Ticket(next(_ids), "victim", 0, 49, 2.0, 300.0, 41, "m")
    assert q.offer(victim, cap=64) is False
    assert q.admit_ready(cap=64) == [victim]


def test_every_way_out_of_the_queue_ends_a_clients_activity() -> None:
    q = queue(max_concurrent=1)
    q.offer(prompt_ticket("runner", 10), cap=1)
    left = prompt_ticket("leaves", 10)
    expires = Ticket(next(_ids), "expires", 0, 10, 0.0, 1.0, 10)
    q.offer(left, cap=1)
    q.offer(expires, cap=1)
    q.withdraw(left.id)
    q.expire(5.0)
    assert q.service.tenants["leaves"].active == 0
    assert q.service.tenants["expires"].active == 0
    q.release(next(iter(q.running)))
    assert q.service.tenants["runner"].active == 0


def test_a_client_running_nothing_goes_before_a_heavier_running_one_it_just_passed() -> None:
    """Between a light client's requests its counter may sit just above a client whose
    long generation still runs (charged once, as it started): it still goes first, into
    the capacity held back for clients running nothing."""
    q = queue(kv_budget=1000)
    long_run = Ticket(next(_ids), "attacker", 0, 800, 0.0, 300.0, 10, "m")
    assert q.offer(long_run, cap=64) is True
    for _ in range(3):
        q.offer(Ticket(next(_ids), "attacker", 0, 800, 1.0, 300.0, 10, "m"), cap=64)
    first = Ticket(next(_ids), "victim", 0, 49, 2.0, 300.0, 41, "m")
    q.offer(first, cap=64)
    assert q.admit_ready(cap=64) == [first]  # in the held-back eighth, past the queue
    q.release(first.id)
    assert q.service.counter("victim") > q.service.counter("attacker")
    second = Ticket(next(_ids), "victim", 0, 49, 3.0, 300.0, 41, "m")
    q.offer(second, cap=64)
    assert q.admit_ready(cap=64) == [second]
