"""RemoteEngine against a scripted engine in a child process: outputs, counts, errors,
aborts, the host's calls, tokenize, the engine's series, and the child's death."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest

from engine.errors import ContextLengthExceeded, EngineFailure, EngineRequestError
from engine.protocol import GenerateOutput, GenerateRequest, ModelInfo, SamplingOptions
from engine.remote.client import RemoteEngine
from engine.scripted import ScriptedEngine


class Counts:
    def __init__(self) -> None:
        self.prompt = 0
        self.output = 0

    def accepted(self, prompt_tokens: int) -> None:
        self.prompt += prompt_tokens

    def generated(self, tokens: int) -> None:
        self.output += tokens


def request(request_id: str = "r", max_tokens: int = 5, **kwargs: object) -> GenerateRequest:
    sampling = SamplingOptions(max_tokens=max_tokens, ignore_eos=bool(kwargs.pop("long", False)))
    return GenerateRequest(request_id, sampling, prompt="one two three", **kwargs)  # type: ignore[arg-type]


def engine_with_series(**kwargs: object) -> ScriptedEngine:
    """A scripted engine whose process's registry holds a `vllm:` family, as vLLM's stat
    logger's would, and one of another name (built in the child)."""
    from prometheus_client import Counter

    Counter("vllm:scripted_steps", "steps, as vLLM names its series", ["model_name"]).labels(
        "scripted"
    ).inc(3)
    Counter("child_only_things", "not the engine's: stays in the child")
    return ScriptedEngine(**kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def engine() -> AsyncIterator[RemoteEngine]:
    placeholder = ModelInfo(("scripted",), 0, 0, "scripted")
    remote = RemoteEngine(
        placeholder, ScriptedEngine, tokens=["a", "b", "c"], token_delay_s=0.01, max_model_len=64
    )
    await remote.start()
    yield remote
    await remote.shutdown()


async def test_outputs_and_counts_arrive(engine: RemoteEngine) -> None:
    assert engine.is_ready() and engine.model.max_model_len == 64
    counts = Counts()
    outputs = [o async for o in engine.generate(request(tally=counts))]
    assert [o.choices[0].text for o in outputs] == ["a", "b", "c"]
    assert outputs[-1].choices[0].finish_reason == "stop"
    assert (counts.prompt, counts.output) == (3, 3)
    assert engine.unfinished_requests() == 0


async def test_concurrent_requests_each_get_their_own(engine: RemoteEngine) -> None:
    async def texts(i: int) -> str:
        return "".join(
            [o.choices[0].text async for o in engine.generate(request(f"r{i}", long=True))]
        )

    assert await asyncio.gather(*(texts(i) for i in range(8))) == ["abcab"] * 8


async def test_engine_errors_come_back_as_theirs(engine: RemoteEngine) -> None:
    with pytest.raises(ContextLengthExceeded):
        [o async for o in engine.generate(request(max_tokens=1000))]
    with pytest.raises(EngineRequestError) as caught:
        engine.detokenize([5000])
    assert caught.value.param == "tokens"
    assert engine.tokenize(prompt="a bb ccc") == [1, 2, 3]
    assert engine.detokenize([1, 2]) == "x xx"


async def test_before_run_runs_first(engine: RemoteEngine) -> None:
    ran: list[str] = []

    async def before() -> None:
        ran.append("woke")

    [o async for o in engine.generate(request(before_run=before))]
    assert ran == ["woke"]


async def test_closing_a_stream_aborts_and_its_counts_still_come(engine: RemoteEngine) -> None:
    counts = Counts()
    stream = engine.generate(request(max_tokens=50, long=True, tally=counts))
    await stream.__anext__()
    await stream.aclose()
    # Counted when the close returns (the usage record is read then), nothing left held.
    assert counts.prompt == 3 and 1 <= counts.output < 50
    assert engine.unfinished_requests() == 0


class CountsAsItCloses(ScriptedEngine):
    """Counts 7 more tokens as a stream closes early, as the vLLM engine counts those it
    made that nobody read: the child sends them only after the abort has come."""

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:  # type: ignore[override]
        finished = False
        try:
            async for output in super().generate(request):
                yield output
            finished = True
        finally:
            if not finished and request.tally is not None:
                request.tally.generated(7)


async def test_a_closed_stream_has_the_counts_made_as_it_closed() -> None:
    placeholder = ModelInfo(("scripted",), 0, 0, "scripted")
    remote = RemoteEngine(placeholder, CountsAsItCloses, tokens=["a", "b"], token_delay_s=0.05)
    await remote.start()
    try:
        counts = Counts()
        stream = remote.generate(request(max_tokens=50, long=True, tally=counts))
        await stream.__anext__()
        await stream.aclose()
        assert counts.output >= 1 + 7  # what was read, and what the close counted
        assert remote.unfinished_requests() == 0
    finally:
        await remote.shutdown()


async def test_a_stream_aborted_before_the_child_ran_it_ends_at_once(
    engine: RemoteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its abort may reach the child before the request's task there has run once."""
    from engine.remote import client

    monkeypatch.setattr(client, "ABORT_WAIT_S", 3.0)
    loop = asyncio.get_running_loop()
    for _ in range(20):
        stream = engine.generate(request(max_tokens=50, long=True, tally=Counts()))
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # sent
        first.cancel()
        started = loop.time()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert loop.time() - started < 2.0  # the child said it ended: no wait to the bound
        assert engine.unfinished_requests() == 0


async def test_host_calls(engine: RemoteEngine) -> None:
    await engine.pause()
    await engine.resume()
    assert await engine.release_memory() is True
    await engine.reacquire_memory()
    await engine.abort("nothing")


async def test_the_engines_series_come_from_its_process_and_only_those() -> None:
    placeholder = ModelInfo(("scripted",), 0, 0, "scripted")
    remote = RemoteEngine(placeholder, engine_with_series, tokens=["a"])
    assert await remote.metrics_exposition() == ""  # not started: nothing to ask
    await remote.start()
    try:
        text = await remote.metrics_exposition()
        assert 'vllm:scripted_steps_total{model_name="scripted"} 3.0' in text
        assert "# TYPE vllm:scripted_steps_total counter" in text
        assert "child_only_things" not in text
        assert "process_" not in text and "python_" not in text  # the child's own
    finally:
        await remote.shutdown()
    assert await remote.metrics_exposition() == ""


async def test_an_engine_in_process_keeps_no_series_apart(engine: RemoteEngine) -> None:
    assert await ScriptedEngine().metrics_exposition() == ""
    assert await engine.metrics_exposition() == ""  # its child's registry has no `vllm:`


async def test_a_dead_child_fails_streams_and_says_so(engine: RemoteEngine) -> None:
    stream = engine.generate(request(max_tokens=50, long=True))
    await stream.__anext__()
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)
    with pytest.raises(EngineFailure):
        async for _ in stream:
            pass
    assert not engine.is_alive() and not engine.is_ready()
    failure = engine.failure()
    assert failure is not None and "exited" in failure
    assert engine.unfinished_requests() == 0


async def test_signals_to_the_group_do_not_stop_the_child(engine: RemoteEngine) -> None:
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGTERM)
    os.kill(engine.pid, signal.SIGINT)
    await asyncio.sleep(0.2)
    assert [o.choices[0].text async for o in engine.generate(request())] == ["a", "b", "c"]
