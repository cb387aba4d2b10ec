"""The scripted engine keeps the requests it ran for tests to read, unless told not to
(a benchmark's millions of requests would otherwise pile up in memory)."""

from __future__ import annotations

from engine.protocol import GenerateRequest, SamplingOptions
from engine.scripted import ScriptedEngine


async def run(engine: ScriptedEngine, request_id: str) -> str:
    request = GenerateRequest(request_id, SamplingOptions(max_tokens=4), prompt="hi")
    outputs = [output async for output in engine.generate(request)]
    return "".join(choice.text for output in outputs for choice in output.choices)


async def test_requests_are_kept_unless_turned_off() -> None:
    kept, not_kept = ScriptedEngine(), ScriptedEngine(keep_requests=False)
    assert await run(kept, "a") == await run(not_kept, "a") == "Hello, world!"
    await run(kept, "b")
    await run(not_kept, "b")
    assert [r.request_id for r in kept.requests] == ["a", "b"]
    assert not_kept.requests == []
