"""Send a request for a sleeping model to a box where it is awake, when there is one.

Behind a router that retries a 429 on another worker (vLLM's router and sglang-router
do, and neither counts a 4xx against the worker's circuit breaker), the first attempt of
a request at a model asleep (or still waking) here is refused with `AwakeElsewhere`: the
router tries the next box that serves the model, where it may be awake. The same request
arriving again within `window_s` means the router found no such box (or came back to
this one): the model wakes here and serves it.

A request is known again by a digest of its client, model and body, which a router
resends unchanged on every attempt; the client is in it so that one key's request never
counts as another key's retry (which would tell that key what the other had sent).
The HTTP side puts the body of the request it serves in `REQUEST_BODY`; a request
without one (an operator's wake, a batch line) is never refused. Digests are kept for
`window_s` and at most `max_kept` at once, so memory stays bounded by the requests
refused in the last window.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar

from engine.errors import AwakeElsewhere

# The body of the request being served, set by the HTTP side for each request.
REQUEST_BODY: ContextVar[bytes | None] = ContextVar("lilac_request_body", default=None)


class AwakeElsewhereFirst:
    """Which attempts at a sleeping model are refused: each request's first."""

    def __init__(
        self,
        window_s: float = 30.0,
        max_kept: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_kept = max_kept
        self._clock = clock
        self._refused: OrderedDict[bytes, float] = OrderedDict()  # digest -> when, oldest first
        self.refusals = 0

    def check(self, model: str, client: str | None = None) -> None:
        """Raise `AwakeElsewhere` for the first attempt of the current request at `model`
        (asleep here); return for a request seen within the window, or one without a body."""
        body = REQUEST_BODY.get()
        if body is None:
            return
        digest = _digest(client or "", model, body)
        now = self._clock()
        self._forget_older_than(now - self.window_s)
        if self._refused.pop(digest, None) is not None:
            return  # the router came back: no box has it awake, so it wakes here
        self._refused[digest] = now
        while len(self._refused) > self.max_kept:
            self._refused.popitem(last=False)
        self.refusals += 1
        raise AwakeElsewhere(
            f"The model `{model}` is asleep on this server; retry on a server where it is "
            "awake, or send the same request here again to wake it."
        )

    def _forget_older_than(self, cutoff: float) -> None:
        while self._refused:
            digest, when = next(iter(self._refused.items()))
            if when >= cutoff:
                return
            del self._refused[digest]


def _digest(client: str, model: str, body: bytes) -> bytes:
    hasher = hashlib.blake2b(client.encode(), digest_size=16)
    hasher.update(b"\0")
    hasher.update(model.encode())
    hasher.update(b"\0")
    hasher.update(body)
    return hasher.digest()
