"""Follower slots (app.tenancy.followers): an owner's bound, other owners apart, and a
slot given back exactly once however its stream ends: sent whole, failing, closed
mid-way, or closed before it ever started."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.errors import TooManyFollowers
from app.tenancy.followers import FollowedStream, Followers


async def frames(count: int, fail: bool = False) -> AsyncIterator[bytes]:
    for n in range(count):
        yield b"%d" % n
    if fail:
        raise RuntimeError("the database went away")


def test_an_owner_holds_at_most_its_bound_and_others_are_apart() -> None:
    followers = Followers(2)
    slots = [followers.take("a"), followers.take("a")]
    with pytest.raises(TooManyFollowers) as refused:
        followers.take("a")
    assert refused.value.code == "too_many_followers" and refused.value.retry_after
    followers.take("b")
    slots[0].release()
    slots[0].release()  # a second release gives nothing back twice
    assert followers.open("a") == 1
    followers.take("a")
    assert followers.open("a") == 2 and followers.open("b") == 1


def test_no_bound_at_zero() -> None:
    followers = Followers(0)
    for _ in range(100):
        followers.take("a")
    assert followers.open("a") == 100


async def test_a_stream_sent_whole_gives_its_slot_back() -> None:
    followers = Followers(1)
    stream = FollowedStream(frames(3), followers.take("a"))
    assert [frame async for frame in stream] == [b"0", b"1", b"2"]
    assert followers.open("a") == 0
    await stream.aclose()  # as EventStream closes every body: nothing given back twice
    assert followers.open("a") == 0


async def test_a_failing_stream_gives_its_slot_back() -> None:
    followers = Followers(1)
    stream = FollowedStream(frames(1, fail=True), followers.take("a"))
    with pytest.raises(RuntimeError):
        _ = [frame async for frame in stream]
    assert followers.open("a") == 0


async def test_a_stream_closed_mid_way_or_never_started_gives_its_slot_back() -> None:
    followers = Followers(2)
    started = FollowedStream(frames(5), followers.take("a"))
    assert await anext(started) == b"0"
    never = FollowedStream(frames(5), followers.take("a"))
    assert followers.open("a") == 2
    await started.aclose()
    await never.aclose()
    assert followers.open("a") == 0
