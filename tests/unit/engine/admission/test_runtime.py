"""The admission runtime over the scripted engine, on an injected clock: gating, queueing,
draining with grace, yielding (engine paused, memory released) and the warm return."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable

import pytest

from engine.admission.lease import admitted
from engine.admission.policy import Policy, State
from engine.admission.probes import GpuSample
from engine.admission.queue import Ticket
from engine.admission.runtime import AdmissionController
from engine.errors import AdmissionRejected, Drained
from engine.protocol import DEFERRED_PREFIX, GenerateOutput, GenerateRequest, SamplingOptions
from engine.scripted import ScriptedEngine

OWNER = GpuSample(90.0, 8000.0, 1)
IDLE = GpuSample()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class StaticProbe:
    blocking = False

    def __init__(self) -> None:
        self.value = IDLE

    def sample(self) -> GpuSample:
        return self.value


class CountingEngine(ScriptedEngine):
    """Counts how often admission paused it."""

    pauses = 0

    async def pause(self) -> None:
        self.pauses += 1
        await super().pause()


Generate = Callable[[GenerateRequest], AsyncIterator[GenerateOutput]]


def make(
    kv_cache_tokens: int = 0, **policy: object
) -> tuple[Generate, AdmissionController, CountingEngine, Clock]:
    """`generate` runs one generation inside an admission lease, as the services do."""
    engine = CountingEngine(token_delay_s=0.01, kv_cache_tokens=kv_cache_tokens)
    clock = Clock()
    settings = {"grace_s": 5.0, "resume_after_s": 10.0, **policy}
    controller = AdmissionController(
        Policy(**settings),  # type: ignore[arg-type]
        StaticProbe(),
        engine,
        clock=clock,
    )
    return functools.partial(admitted, controller, engine), controller, engine, clock


def request(rid: str, tokens: int = 4, client: str = "c", priority: int = 0) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid,
        sampling=SamplingOptions(max_tokens=tokens, ignore_eos=True),
        messages=[{"role": "user", "content": "hi"}],
        client=client,
        priority=priority,
    )


async def collect(generate: Generate, req: GenerateRequest) -> int:
    return sum([len(o.choices) async for o in generate(req)])


async def test_admitted_generation_runs_and_counts() -> None:
    generate, controller, _, _ = make()
    assert await collect(generate, request("r1")) == 4
    assert controller.counters["admitted"] == 1
    assert controller.counters["completed"] == 1
    assert not controller.queue.running


async def test_owner_reclaim_drains_then_yields_then_returns_warm() -> None:
    generate, controller, engine, clock = make()
    stream = generate(request("long", tokens=1000))
    await anext(stream)  # admitted and running

    await controller.observe(OWNER)
    assert controller.state is State.DRAINING
    with pytest.raises(AdmissionRejected) as rejected:
        await anext(generate(request("new")))
    assert (rejected.value.status, rejected.value.code) == (503, "draining")
    assert rejected.value.retry_after_s == pytest.approx(15.0)  # grace 5 + hysteresis 10
    await anext(stream)  # still generating within the grace period

    clock.now += 5.0
    await controller.observe(OWNER)
    assert controller.state is State.YIELDED
    assert (engine.paused, engine.memory_released, controller.counters["drained"]) == (
        True,
        True,
        1,
    )
    with pytest.raises(Drained):
        async for _ in stream:
            pass
    assert engine.unfinished_requests() == 0
    assert not controller.queue.running

    # Owner gone: 10 s of quiet, then the same engine serves again.
    clock.now += 1.0
    await controller.observe(IDLE)
    clock.now += 9.9
    await controller.observe(IDLE)
    assert controller.state is State.YIELDED
    clock.now += 0.1
    await controller.observe(IDLE)
    assert controller.state is State.SERVING
    assert (engine.paused, engine.memory_released) == (False, False)
    assert await collect(generate, request("after")) == 4
    assert engine.pauses == 1


async def test_drain_ends_as_soon_as_the_last_request_finishes() -> None:
    generate, controller, engine, _ = make(grace_s=60.0)
    stream = generate(request("short", tokens=3))
    await anext(stream)
    await controller.observe(OWNER)
    assert controller.state is State.DRAINING
    rest = [o async for o in stream]  # it finishes normally within the grace period
    assert rest[-1].choices[0].finish_reason == "length"
    await asyncio.sleep(0)  # the release schedules the transition's effects
    for _ in range(5):
        await asyncio.sleep(0.01)
        if engine.paused:
            break
    assert controller.state is State.YIELDED
    assert engine.paused
    assert controller.counters["drained"] == 0


async def test_queue_waits_for_a_slot() -> None:
    generate, controller, _, _ = make(max_concurrent=1)
    first = generate(request("one", tokens=20))
    await anext(first)
    waiting = asyncio.create_task(collect(generate, request("two", client="other")))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    assert len(controller.queue.waiting) == 1
    await first.aclose()  # frees the slot
    assert await waiting == 4
    assert controller.counters["queued"] == 1


async def test_a_newcomer_behind_a_flood_starts_at_once() -> None:
    """A flood holds all it may of the cap (7 of 8) and queues more; another client's
    first request is queued behind it and still starts at once, in the held-back slot,
    without waiting for any of the flood to finish."""
    generate, controller, _, _ = make(max_concurrent=8)
    flood = [generate(request(f"f{i}", tokens=1000, client="flood")) for i in range(7)]
    for stream in flood:
        await anext(stream)
    queued = [
        asyncio.create_task(collect(generate, request(f"q{i}", tokens=1000, client="flood")))
        for i in range(3)
    ]
    await asyncio.sleep(0.02)
    assert len(controller.queue.waiting) == 3 and len(controller.queue.running) == 7
    newcomer = generate(request("victim", tokens=2, client="victim"))
    first = await asyncio.wait_for(anext(newcomer), 1.0)
    assert first.choices
    assert len(controller.queue.waiting) == 3  # the flood still waits
    await newcomer.aclose()
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    for stream in flood:
        await stream.aclose()
    assert not controller.queue.running and not controller.queue.waiting


async def test_prompts_count_as_prefilling_until_their_first_output() -> None:
    generate, controller, engine, _ = make(max_concurrent=8)
    name = engine.model.name
    stream = generate(request("one", tokens=1000))
    started = asyncio.create_task(anext(stream))
    await asyncio.sleep(0)  # admitted, no output yet
    assert controller.queue.models[name].prefill_budget == 2048  # a context of the model
    assert controller.queue.prefill_pending("c", name) > 0
    await started
    assert controller.queue.prefill_pending("c", name) == 0  # the first output: prefilled
    await stream.aclose()


async def test_a_deferred_prompt_counts_until_its_first_output_and_says_so() -> None:
    generate, controller, _, _ = make(max_concurrent=8)
    prefilled: list[str] = []
    controller.deferred_prefilled.append(lambda: prefilled.append("deferred"))
    interactive = generate(request("i", tokens=100))
    line = generate(request("b", tokens=100, client=DEFERRED_PREFIX + "k"))
    firsts = [asyncio.create_task(anext(interactive)), asyncio.create_task(anext(line))]
    await asyncio.sleep(0)  # both admitted, neither has an output yet
    assert controller.deferred_prefilling() == 1  # the interactive prompt is not counted
    assert controller.deferred_running() == 1
    await asyncio.gather(*firsts)
    assert controller.deferred_prefilling() == 0
    assert prefilled == ["deferred"]  # once, and only for the deferred generation
    async for _ in line:
        pass
    assert prefilled == ["deferred"]
    await interactive.aclose()


async def test_a_request_cancelled_as_it_is_granted_gives_its_slot_back() -> None:
    """A queued request whose slot is granted in the same instant its client leaves
    (a flood cut off at once frees slots for its own queued requests): the cancel
    wins, the slot comes back, nothing runs."""
    generate, controller, engine, _ = make(max_concurrent=1)
    first = generate(request("one", tokens=1000))
    await anext(first)
    ticket = Ticket(99, "other", 0, 10, 0.0, 0.0, model=engine.model.name)
    queued = asyncio.create_task(controller._acquire(ticket, "two"))
    await asyncio.sleep(0.01)
    assert len(controller.queue.waiting) == 1
    (lease,) = controller._leases.values()
    controller._release(lease)  # grants the queued ticket at once ...
    queued.cancel()  # ... as its client goes
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert not controller.queue.running and not controller.queue.waiting
    await first.aclose()


async def test_queue_timeout_is_503() -> None:
    generate, controller, _, _ = make(max_concurrent=1, queue_timeout_s=0.05)
    first = generate(request("one", tokens=1000))
    await anext(first)
    with pytest.raises(AdmissionRejected) as rejected:
        await collect(generate, request("two"))
    assert rejected.value.code == "queue_timeout"
    assert not controller.queue.waiting
    await first.aclose()


async def test_a_client_leaving_the_queue_frees_its_place() -> None:
    generate, controller, _, _ = make(max_concurrent=1)
    first = generate(request("one", tokens=1000))
    await anext(first)
    waiting = asyncio.create_task(collect(generate, request("two")))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert not controller.queue.waiting
    await first.aclose()
    assert not controller.queue.running


async def test_queued_requests_are_rejected_when_the_owner_returns() -> None:
    generate, controller, _, _ = make(max_concurrent=1)
    first = generate(request("one", tokens=1000))
    await anext(first)
    waiting = asyncio.create_task(collect(generate, request("two")))
    await asyncio.sleep(0.01)
    await controller.observe(OWNER)
    with pytest.raises(AdmissionRejected) as rejected:
        await waiting
    assert rejected.value.code == "draining"
    await first.aclose()


async def test_throttled_state_lowers_the_cap() -> None:
    generate, controller, _, _ = make(max_concurrent=4, throttled_concurrent=1)
    await controller.observe(GpuSample(10.0, 0.0, 1))
    assert controller.state is State.THROTTLED
    first = generate(request("one", tokens=1000))
    await anext(first)
    second = asyncio.create_task(collect(generate, request("two", client="x")))
    await asyncio.sleep(0.02)
    assert len(controller.queue.waiting) == 1
    await first.aclose()
    assert await second == 4


async def test_stop_drains_with_grace_and_stays_yielded() -> None:
    generate, controller, engine, clock = make(grace_s=60.0)
    stream = generate(request("s", tokens=3))
    await anext(stream)
    stopping = asyncio.create_task(controller.stop())
    await asyncio.sleep(0.01)
    assert controller.state is State.DRAINING
    assert len([o async for o in stream]) == 2  # finished, not cut
    await asyncio.wait_for(stopping, 1.0)
    assert controller.state is State.YIELDED
    clock.now += 1000
    await controller.observe(IDLE)
    assert controller.state is State.YIELDED
    assert engine.paused


async def test_a_failing_probe_counts_as_the_owner() -> None:
    _, controller, _, _ = make()

    class Broken:
        blocking = True

        def sample(self) -> GpuSample:
            raise RuntimeError("NVML gone")

    controller.probe = Broken()
    await controller.observe(await controller._sample())
    assert controller.state is State.YIELDED


async def test_probe_loop_samples_on_its_interval() -> None:
    _, controller, _, _ = make(probe_interval_s=0.01)
    probe = controller.probe
    assert isinstance(probe, StaticProbe)
    probe.value = OWNER
    await controller.start()
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if controller.state is State.YIELDED:
                break
        assert controller.state is State.YIELDED
    finally:
        await controller.close()


async def test_kv_budget_comes_from_the_engine() -> None:
    """Two requests of ~90 tokens each do not fit a 150-token KV cache together."""
    generate, controller, engine, _ = make(kv_cache_tokens=150)
    first = generate(request("one", tokens=80))
    await anext(first)
    assert controller.queue.budget_of(engine.model.name) == 150
    second = asyncio.create_task(collect(generate, request("two", tokens=80, client="b")))
    await asyncio.sleep(0.02)
    assert len(controller.queue.waiting) == 1
    await first.aclose()
    assert await second == 80


async def test_configured_kv_budget_wins_and_minus_one_disables_it() -> None:
    generate, controller, engine, _ = make(kv_cache_tokens=150, kv_budget_tokens=-1)
    first = generate(request("one", tokens=80))
    await anext(first)
    assert controller.queue.budget_of(engine.model.name) == -1
    assert await collect(generate, request("two", tokens=80, client="b")) == 80
    await first.aclose()


async def test_a_failed_resume_is_retried_at_the_next_sample() -> None:
    generate, controller, engine, clock = make(resume_after_s=0.0)
    await controller.observe(OWNER)
    assert engine.paused
    real_resume = engine.resume
    calls = []

    async def flaky_resume() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("wake-up failed")
        await real_resume()

    engine.resume = flaky_resume  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await controller.observe(IDLE)
    assert controller.state is State.SERVING and controller.engine_paused
    clock.now += 1
    await controller.observe(IDLE)
    assert not controller.engine_paused and len(calls) == 2
    assert await collect(generate, request("after")) == 4


async def test_deferred_work_hears_the_model_of_each_arriving_and_queued_request() -> None:
    """The deferred runner cuts only lines on the model an interactive request uses:
    admission tells it the model as the request is offered, and again if it queues."""
    generate, controller, engine, _ = make(max_concurrent=1)
    arrived: list[str] = []
    queued: list[str] = []
    controller.interactive_arrived.append(arrived.append)
    controller.interactive_queued.append(queued.append)
    first = asyncio.create_task(collect(generate, request("r1", tokens=20)))
    while not controller.queue.running:
        await asyncio.sleep(0.005)
    second = asyncio.create_task(collect(generate, request("r2", client="other")))
    await asyncio.gather(first, second)
    name = engine.model.name
    assert arrived == [name, name] and queued == [name]
