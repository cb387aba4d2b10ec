"""A request's first attempt at a sleeping model is refused so that a router retries it
where the model is awake; the same request again wakes the model here. Over the pool
of scripted engines, and the refusal memory alone."""

from __future__ import annotations

from contextvars import copy_context

import pytest

from engine.errors import AwakeElsewhere
from engine.warm.elsewhere import REQUEST_BODY, AwakeElsewhereFirst
from engine.warm.model import ModelState, WarmConfig
from tests.unit.engine.warm.test_pool import Clock, make_pool, model, run


def refused(
    policy: AwakeElsewhereFirst, name: str, body: bytes | None, client: str | None = None
) -> bool:
    def attempt() -> bool:
        REQUEST_BODY.set(body)
        try:
            policy.check(name, client)
        except AwakeElsewhere:
            return True
        return False

    return copy_context().run(attempt)  # each attempt its own request, as on the server


def test_the_first_attempt_is_refused_and_the_same_request_again_is_not() -> None:
    policy = AwakeElsewhereFirst(window_s=10, clock=Clock())
    assert refused(policy, "alpha", b'{"n": 1}')
    assert not refused(policy, "alpha", b'{"n": 1}')
    # Forgotten once let through: a later identical request is a new one, refused again.
    assert refused(policy, "alpha", b'{"n": 1}')
    assert refused(policy, "alpha", b'{"n": 2}')  # another body: another request
    assert refused(policy, "beta", b'{"n": 2}')  # the same body for another model
    assert policy.refusals == 4


def test_one_keys_request_is_never_taken_for_another_keys_retry() -> None:
    policy = AwakeElsewhereFirst(window_s=10, clock=Clock())
    assert refused(policy, "alpha", b'{"n": 1}', client="key-a")
    # The same body from another key is that key's first attempt: refused, so its
    # answer cannot tell it that key-a sent that body.
    assert refused(policy, "alpha", b'{"n": 1}', client="key-b")
    assert not refused(policy, "alpha", b'{"n": 1}', client="key-a")
    assert not refused(policy, "alpha", b'{"n": 1}', client="key-b")


def test_a_request_without_a_body_is_never_refused() -> None:
    policy = AwakeElsewhereFirst(clock=Clock())
    assert not refused(policy, "alpha", None)  # an operator's wake, a batch line
    assert policy.refusals == 0


def test_a_request_back_after_the_window_is_refused_again() -> None:
    clock = Clock()
    policy = AwakeElsewhereFirst(window_s=10, clock=clock)
    assert refused(policy, "alpha", b"x")
    clock.now += 10.5
    assert refused(policy, "alpha", b"x")
    clock.now += 9.5
    assert not refused(policy, "alpha", b"x")


def test_memory_holds_at_most_max_kept_refusals() -> None:
    policy = AwakeElsewhereFirst(window_s=60, max_kept=8, clock=Clock())
    for index in range(100):
        assert refused(policy, "alpha", str(index).encode())
    assert len(policy._refused) == 8
    assert refused(policy, "alpha", b"0")  # dropped: refused as a new request
    assert not refused(policy, "alpha", b"99")  # kept: let through


async def test_the_pool_refuses_the_first_attempt_at_a_sleeping_model_without_waking_it() -> None:
    pool, _, sleeper, _ = make_pool(WarmConfig(), WarmConfig(), prefer_awake_elsewhere=True)
    alpha, other = model(pool, "m0"), model(pool, "m1")
    await pool.sleep(alpha)
    REQUEST_BODY.set(b'{"model": "m0"}')
    with pytest.raises(AwakeElsewhere):
        await run(alpha, "r1")
    assert alpha.state is ModelState.ASLEEP and sleeper.wakes == []
    assert await run(other, "r2") == 3  # an awake model is never refused
    assert await run(alpha, "r3") == 3  # the same request again: woken and served
    assert alpha.state is ModelState.AWAKE and len(sleeper.wakes) == 1


async def test_without_the_setting_a_request_wakes_its_model_at_once() -> None:
    pool, _, sleeper, _ = make_pool(WarmConfig())
    alpha = model(pool, "m0")
    await pool.sleep(alpha)
    REQUEST_BODY.set(b'{"model": "m0"}')
    assert await run(alpha, "r1") == 3
    assert len(sleeper.wakes) == 1
