"""The admission controller over the real vLLM engine, with a scripted owner timeline:
a steady streaming load, the owner active for a while, then idle again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx

from app.config.settings import Settings
from engine.admission.probes import GpuSample, ScriptedProbe, Segment
from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.protocol import GenerateOutput, GenerateRequest
from engine.vllm_backend.engine import VLLMEngine
from tests.client import app_client, provided, stream_events

URL = "/v1/chat/completions"
OWNER_FROM_S, OWNER_UNTIL_S, LOAD_S = 5.0, 10.0, 17.0
GRACE_S, RESUME_AFTER_S, INTERVAL_S = 1.5, 2.0, 0.2
# The engine finishes its current step before it pauses: seconds on this shared 2-core CPU.
PAUSE_ALLOWANCE_S = 5.0


class RecordingEngine:
    """The real engine, noting when each output left it."""

    def __init__(self, engine: VLLMEngine) -> None:
        self.inner = engine
        self.outputs: list[float] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        async for output in self.inner.generate(request):
            self.outputs.append(time.monotonic())
            yield output


async def client_loop(http: httpx.AsyncClient, name: str, until: float) -> list[str]:
    """Streams requests back to back; returns how each one ended."""
    outcomes = []
    body = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": f"Tell {name} a story about a dragon."}],
        "max_tokens": 16,
        "stream": True,
        "user": name,
    }
    while time.monotonic() < until:
        response = await http.post(URL, json=body)
        outcomes.append(outcome(response))
        if response.status_code == 503:
            await asyncio.sleep(min(float(response.headers["retry-after"]), 0.3))
    return outcomes


def outcome(response: httpx.Response) -> str:
    """One of the allowed endings, or an AssertionError."""
    if response.status_code == 503:
        assert response.headers["retry-after"]
        code = response.json()["error"]["code"]
        assert code in {"draining", "yielded"}, response.text
        return f"503:{code}"
    assert response.status_code == 200, response.text
    last = stream_events(response, allow_error=True)[-1]  # ends in data: [DONE]
    if "error" in last:
        assert last["error"]["code"] == "draining", last
        return "stream:drained"
    assert last["choices"][0]["finish_reason"] in {"stop", "length"}
    return "stream:complete"


async def test_owner_comes_and_goes_under_streaming_load(real_engine: VLLMEngine) -> None:
    llm_before = real_engine._llm
    assert real_engine.model.kv_cache_tokens > 1000  # the admission's token budget
    recording = RecordingEngine(real_engine)
    probe = ScriptedProbe(
        [Segment(OWNER_FROM_S, GpuSample(95.0, 6000.0, 1)), Segment(OWNER_UNTIL_S, GpuSample())]
    )
    settings = Settings(
        grace_period=GRACE_S, resume_after=RESUME_AFTER_S, probe_interval=INTERVAL_S
    )
    async with app_client(recording, settings, probe=probe, timeout=60) as c:  # type: ignore[arg-type]
        controller = provided(c.app, "admission")
        probe.restart()
        await controller.start()
        try:
            until = probe.started_at + LOAD_S
            results = await asyncio.gather(*(client_loop(c, n, until) for n in ("ann", "bo", "cy")))
        finally:
            await controller.close()

    endings = [ending for per_client in results for ending in per_client]
    events = list(controller.events)
    paused = [t for t, e in events if e == "engine_paused"]
    resumed = [t for t, e in events if e == "engine_resumed"]
    assert len(paused) == len(resumed) == 1, events
    yield_latency = paused[0] - (probe.started_at + OWNER_FROM_S)
    assert 0 <= yield_latency <= GRACE_S + INTERVAL_S + PAUSE_ALLOWANCE_S, events
    # Nothing generated while yielded; and generating again afterwards.
    assert not [t for t in recording.outputs if paused[0] < t < resumed[0]]
    assert [t for t in recording.outputs if t > resumed[0]]
    before = [e for e in endings if e == "stream:complete"]
    assert len(before) >= 3, endings
    assert any(e.startswith("503:") for e in endings), endings
    # The same engine, never rebuilt, now idle.
    assert real_engine._llm is llm_before and real_engine.is_ready()
    assert real_engine.unfinished_requests() == 0
    assert controller.state == "serving"
    print(f"\nyield latency {yield_latency:.3f} s; endings: {sorted(set(endings))}")
