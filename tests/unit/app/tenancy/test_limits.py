"""Per-key limits: the buckets, limits of zero, token settlement, concurrency, and
clock changes (the buckets run on the monotonic clock, so the wall clock jumping back
or forward across a window changes nothing)."""

from __future__ import annotations

import time

import pytest

from app.tenancy.keys.store import KeyLimits
from app.tenancy.limits import Limiter, RateLimited, duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_refill_continuously() -> None:
    clock = Clock()
    limiter = Limiter(clock)
    limits = KeyLimits(rpm=2)
    limiter.admit("k", limits, 0)
    limiter.admit("k", limits, 0)
    with pytest.raises(RateLimited, match="requests per minute") as refused:
        limiter.admit("k", limits, 0)
    assert refused.value.retry_after_s == pytest.approx(30.0)
    clock.now += 30
    limiter.admit("k", limits, 0)


def test_limits_of_zero_refuse_everything() -> None:
    limiter = Limiter(Clock())
    for limits in (KeyLimits(rpm=0), KeyLimits(tpm=0), KeyLimits(max_concurrent=0)):
        with pytest.raises(RateLimited) as refused:
            limiter.admit("k", limits, 1)
        assert 1 <= refused.value.retry_after_s <= 60  # finite, for Retry-After


def test_tokens_are_reserved_then_settled() -> None:
    clock = Clock()
    limiter = Limiter(clock)
    limits = KeyLimits(rpm=None, tpm=100)
    held = limiter.admit("k", limits, 80)
    with pytest.raises(RateLimited, match="tokens per minute"):
        limiter.admit("k", limits, 30)
    limiter.settle(held, 10)  # used 10 of the 80 reserved: 70 come back
    headers = dict(limiter.headers("k", limits))
    assert headers[b"x-ratelimit-remaining-tokens"] == b"90"
    limiter.admit("k", limits, 30)
    with pytest.raises(RateLimited):  # more than the whole limit never fits
        limiter.admit("k", limits, 101)


def test_concurrent_requests() -> None:
    limiter = Limiter(Clock())
    limits = KeyLimits(rpm=None, max_concurrent=1)
    held = limiter.admit("k", limits, 0)
    with pytest.raises(RateLimited, match="concurrent"):
        limiter.admit("k", limits, 0)
    limiter.settle(held, 0)
    limiter.settle(held, 0)  # settling twice gives back one slot only
    limiter.admit("k", limits, 0)
    with pytest.raises(RateLimited):
        limiter.admit("k", limits, 0)


def test_wall_clock_changes_do_not_move_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real limiter (time.monotonic) while the wall clock jumps a day back and a day
    forward: the exhausted bucket stays exhausted, and does not lock up either."""
    limiter = Limiter()
    limits = KeyLimits(rpm=60)  # one a second
    for _ in range(60):
        limiter.admit("k", limits, 0)
    wall = time.time()
    for jump in (-86400.0, 86400.0):
        monkeypatch.setattr(time, "time", lambda jump=jump: wall + jump)
        with pytest.raises(RateLimited) as refused:
            limiter.admit("k", limits, 0)
        assert refused.value.retry_after_s <= 1.0
    time.sleep(1.05)
    limiter.admit("k", limits, 0)  # one came back after a real second


def test_reset_header_format() -> None:
    assert duration(0.25) == b"250ms"
    assert duration(1.5) == b"1.5s"
    assert duration(360) == b"6m0s"


def test_a_request_of_several_prompts_takes_a_slot_each() -> None:
    limiter = Limiter(Clock())
    limits = KeyLimits(rpm=None, max_concurrent=4)
    three = limiter.admit("k", limits, 0, slots=3)
    with pytest.raises(RateLimited, match="count as 2"):
        limiter.admit("k", limits, 0, slots=2)
    one = limiter.admit("k", limits, 0)  # the fourth slot
    limiter.settle(three, 0)  # all three come back at once
    limiter.admit("k", limits, 0, slots=3)
    limiter.settle(one, 0)
    with pytest.raises(RateLimited, match="5 prompts") as never:
        limiter.admit("k", limits, 0, slots=5)  # more than the key may ever run
    assert never.value.retry_after_s == 60.0


def test_the_rate_limit_headers_as_the_buckets_stand() -> None:
    clock = Clock()
    limiter = Limiter(clock)
    limits = KeyLimits(rpm=60, tpm=1000)
    held = limiter.admit("k", limits, 1500 // 2)
    limiter.settle(held, 1200)  # used more than it reserved: the bucket goes below 0
    headers = limiter.headers("k", limits)
    assert headers == [
        (b"x-ratelimit-limit-requests", b"60"),
        (b"x-ratelimit-remaining-requests", b"59"),
        (b"x-ratelimit-reset-requests", b"1s"),
        (b"x-ratelimit-limit-tokens", b"1000"),
        (b"x-ratelimit-remaining-tokens", b"0"),
        (b"x-ratelimit-reset-tokens", b"1m12s"),
    ]
    clock.now += 0.5  # half a request and 8.3 tokens back: remaining counts whole ones
    headers = dict(limiter.headers("k", limits))
    assert headers[b"x-ratelimit-remaining-requests"] == b"59"
    assert headers[b"x-ratelimit-reset-requests"] == b"500ms"
    only_requests = dict(limiter.headers("r", KeyLimits(rpm=10, tpm=None)))
    assert set(only_requests) == {
        b"x-ratelimit-limit-requests",
        b"x-ratelimit-remaining-requests",
        b"x-ratelimit-reset-requests",
    }
    assert limiter.headers("none", KeyLimits(rpm=None, tpm=None)) == []


def test_a_key_under_its_limits_gets_the_same_headers_until_a_level_changes() -> None:
    clock = Clock()
    limiter = Limiter(clock)
    limits = KeyLimits(rpm=60, tpm=1000)
    first = limiter.admit("k", limits, 100)
    limiter.settle(first, 100)
    clock.now += 60  # both buckets full again: the next request leaves the same levels
    second = limiter.admit("k", limits, 100)
    assert second.headers is first.headers
    assert second.headers == [
        (b"x-ratelimit-limit-requests", b"60"),
        (b"x-ratelimit-remaining-requests", b"59"),
        (b"x-ratelimit-reset-requests", b"1s"),
        (b"x-ratelimit-limit-tokens", b"1000"),
        (b"x-ratelimit-remaining-tokens", b"900"),
        (b"x-ratelimit-reset-tokens", b"6s"),
    ]
    third = limiter.admit("k", limits, 100)  # one request and 100 tokens further down
    assert third.headers is not first.headers
    assert dict(third.headers or [])[b"x-ratelimit-remaining-requests"] == b"58"
    assert dict(third.headers or [])[b"x-ratelimit-remaining-tokens"] == b"800"
    assert first.headers == second.headers  # the list given out earlier is left as it was
