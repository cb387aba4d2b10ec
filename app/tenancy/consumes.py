"""What a request consumes of its key's limits, as its route declares it.

Every keyed route says what it takes in one `Consumes` and hands it to one call:
`Tenancy.admit` for a request answered now (the generation routes, `/tokenize`,
`count_tokens`, creating a background response or a batch, the Files API's uploads and
reads; an upload's stored bytes are app.tenancy.quotas'), `DeferredLimits.hold` for
deferred work run later (a batch line, a background response's run), `Tenancy.follow`
for an event stream of a background response (`follower`: it holds a connection open,
and one of its owner's follower slots, until it ends). The call checks the model
against the key, reserves what the key's limits bound, and for a request that generates
returns the meter that settles and bills it exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Consumes:
    endpoint: str  # the route, as the usage row names it
    model: str | None = None  # a model the key must be allowed (404 otherwise)
    tokens: int = 0  # reserved against the key's tokens per minute, settled at the end
    slots: int = 0  # requests it runs at once in the engine (0: it generates nothing)
    n: int = 1  # choices a prompt, for the usage row
    follower: bool = False  # an event stream held open: one of the owner's follower slots

    @property
    def generates(self) -> bool:
        """Whether it runs the engine: it then holds `slots` of the key's concurrency
        and gets a meter (a usage row); otherwise it takes one request of the key's
        requests per minute and writes no usage row."""
        return self.slots > 0
