"""How many wakes each client may cause: a sleeping model's wake costs the box seconds
and may put another model to sleep, so a client must not be able to make two models
evict each other in a loop.

Each client (admission's fairness key: with API keys, the key) has a bucket of
`per_minute` wakes, refilled continuously. A request that starts a wake takes one; a
request that joins a wake already under way, or finds its model awake, takes none.
Buckets run on `time.monotonic` (or the pool's clock) and full ones are forgotten, so
memory stays bounded by the clients that woke a model within the last minute.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from engine.errors import WakeLimited

_PRUNE_AT = 4096  # buckets kept before full ones are dropped


class WakeBudget:
    def __init__(self, per_minute: int | None, clock: Callable[[], float]) -> None:
        self.per_minute = per_minute  # None: unlimited
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}  # client -> (level, stamp)

    def take(self, client: str | None, model: str) -> None:
        """One wake for `client`, or `WakeLimited` saying when the next one is allowed.
        Requests without a client (an operator's wake) are not counted."""
        limit = self.per_minute
        if client is None or limit is None:
            return
        now = self._clock()
        level = self._level(client, now)
        if level < 1:
            wait = math.inf if limit <= 0 else (1 - level) * 60.0 / limit
            raise WakeLimited(
                f"This client has woken sleeping models {limit} times in the last minute "
                f"(the limit); `{model}` is asleep. Retry later, or use a model that is awake.",
                min(wait, 60.0),
            )
        self._levels[client] = (level - 1, now)
        if len(self._levels) > _PRUNE_AT:
            self._prune(now)

    def _level(self, client: str, now: float) -> float:
        limit = self.per_minute or 0
        level, stamp = self._levels.get(client, (float(limit), now))
        return min(float(limit), level + (now - stamp) * limit / 60.0)

    def _prune(self, now: float) -> None:
        limit = float(self.per_minute or 0)
        for client in list(self._levels):
            if self._level(client, now) >= limit:
                del self._levels[client]
