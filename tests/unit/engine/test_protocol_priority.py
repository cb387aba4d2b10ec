"""The priority a request has in the engine's scheduler: deferred work after any
interactive request, whatever priority either asks for (lower runs sooner)."""

from __future__ import annotations

from engine.protocol import (
    DEFERRED_PREFIX,
    GenerateRequest,
    SamplingOptions,
    scheduling_priority,
)


def _request(client: str | None, priority: int) -> GenerateRequest:
    return GenerateRequest("r", SamplingOptions(), prompt="p", client=client, priority=priority)


def test_deferred_work_goes_after_every_interactive_priority() -> None:
    interactive = [_request(None, 0), _request("key-a", 5), _request("key-b", 10**9)]
    deferred = [_request(DEFERRED_PREFIX + "key-a", 0), _request(DEFERRED_PREFIX + "b", -10)]
    assert scheduling_priority(interactive[1]) == 5  # an interactive request's own
    assert max(map(scheduling_priority, interactive)) < min(map(scheduling_priority, deferred))
    # Among deferred requests, their own order holds.
    assert scheduling_priority(deferred[1]) < scheduling_priority(deferred[0])
