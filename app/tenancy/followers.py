"""Follower slots: how many event streams of background responses
(`GET /v1/responses/{id}?stream=true`, `background: true` with `stream: true`) each
owner (a key, or the anonymous owner of a keyless server) has open at once.

Each open stream polls the database until it ends, so an owner holds at most
`--max-followers-per-key` of them; one more is a 429 `too_many_followers`. The count is
this replica's, in memory: it needs no database round, and a stream is counted only on
the replica that serves it. A slot is taken before the stream starts and given back
once, however the stream ends (`FollowedStream`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from app.errors import TooManyFollowers

# A follower slot frees when a stream ends, which for a live response is when it is final:
# a few seconds is a fair first retry.
RETRY_AFTER_S = 5.0


class FollowerSlot:
    """One open stream of an owner's; `release` gives it back (the second call does
    nothing)."""

    __slots__ = ("_followers", "_owner")

    def __init__(self, followers: Followers, owner: str) -> None:
        self._followers: Followers | None = followers
        self._owner = owner

    def release(self) -> None:
        followers, self._followers = self._followers, None
        if followers is not None:
            followers._release(self._owner)


class Followers:
    """The open follower streams of each owner on this replica."""

    def __init__(self, max_per_owner: int = 0) -> None:
        self.max_per_owner = max_per_owner  # 0: no bound
        self._open: dict[str, int] = {}

    def take(self, owner: str) -> FollowerSlot:
        """One of `owner`'s slots, or `TooManyFollowers` when it holds them all."""
        held = self._open.get(owner, 0)
        if 0 < self.max_per_owner <= held:
            raise TooManyFollowers(self.max_per_owner, RETRY_AFTER_S)
        self._open[owner] = held + 1
        return FollowerSlot(self, owner)

    def open(self, owner: str) -> int:
        """How many streams `owner` has open here."""
        return self._open.get(owner, 0)

    def _release(self, owner: str) -> None:
        held = self._open.pop(owner, 0) - 1
        if held > 0:  # an owner with none open takes no room
            self._open[owner] = held


class FollowedStream:
    """A follower's body holding its slot: given back when the events end (sent whole
    or failing) or the stream is closed (`aclose`, which `EventStream` calls however the
    response ends, even when the body never started)."""

    __slots__ = ("_body", "_slot")

    def __init__(self, body: AsyncIterator[bytes], slot: FollowerSlot) -> None:
        self._body = body
        self._slot = slot

    def __aiter__(self) -> FollowedStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._body)
        except BaseException:  # the end, an error or a cancel: the stream is over
            self._slot.release()
            raise

    async def aclose(self) -> None:
        try:
            close = getattr(self._body, "aclose", None)
            if close is not None:
                await close()
        finally:
            self._slot.release()
