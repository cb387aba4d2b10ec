"""The pool's rules over scripted engines: routing, keep_alive, wake on request, one
shared wake, the LRU rule under a memory budget, failing wakes, and the owner's reclaim
through the admission controller."""

from __future__ import annotations

import asyncio

import pytest

from engine.admission.lease import admitted
from engine.admission.policy import Policy, State
from engine.admission.probes import GpuSample
from engine.admission.runtime import AdmissionController
from engine.errors import ModelStateConflict, ModelWakeFailed
from engine.protocol import GenerateRequest, ModelHost, SamplingOptions
from engine.scripted import ScriptedEngine
from engine.warm.host import PoolHost
from engine.warm.model import ModelState, WarmConfig, WarmModel
from engine.warm.pool import NO_KEEP_ALIVE_CHECK_S, ModelPool
from engine.warm.sleeper import PauseSleeper


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingSleeper(PauseSleeper):
    """Pauses and resumes, counting wakes; a wake takes `wake_s` and may be made to fail."""

    def __init__(self, wake_s: float = 0.0) -> None:
        self.wake_s = wake_s
        self.wakes: list[ModelHost] = []
        self.sleeps: list[ModelHost] = []
        self.fail_wake = False

    async def sleep(self, host: ModelHost) -> None:
        self.sleeps.append(host)
        await super().sleep(host)

    async def wake(self, host: ModelHost) -> None:
        self.wakes.append(host)
        await asyncio.sleep(self.wake_s)
        if self.fail_wake:
            raise RuntimeError("the accelerator said no")
        await super().wake(host)


def make_pool(
    *configs: WarmConfig, budget_gib: float | None = None, wake_s: float = 0.0, **options: float
) -> tuple[ModelPool, list[ScriptedEngine], CountingSleeper, Clock]:
    clock = Clock()
    sleeper = CountingSleeper(wake_s)
    pool = ModelPool(sleeper, budget_gib=budget_gib, clock=clock, **options)
    engines = []
    for index, config in enumerate(configs):
        engine = ScriptedEngine(served_names=(f"m{index}",), token_delay_s=0.001)
        engines.append(engine)
        pool.add(engine, config)
    return pool, engines, sleeper, clock


def request(rid: str, tokens: int = 3) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid,
        sampling=SamplingOptions(max_tokens=tokens, ignore_eos=True),
        prompt="hello",
    )


async def run(model: WarmModel, rid: str, tokens: int = 3) -> int:
    return sum([len(o.choices) async for o in model.generate(request(rid, tokens))])


def model(pool: ModelPool, name: str) -> WarmModel:
    found = pool.get(name)
    assert found is not None
    return found


async def test_a_request_goes_to_the_model_it_names() -> None:
    pool, engines, _, _ = make_pool(WarmConfig(), WarmConfig())
    assert await run(model(pool, "m1"), "r1") == 3
    assert [r.request_id for r in engines[1].requests] == ["r1"]
    assert engines[0].requests == []
    assert pool.get("nope") is None


async def test_two_models_may_not_share_a_name() -> None:
    pool = ModelPool(PauseSleeper())
    pool.add(ScriptedEngine(served_names=("a", "b")))
    with pytest.raises(ValueError, match="`b`"):
        pool.add(ScriptedEngine(served_names=("b",)))


async def test_an_idle_model_sleeps_after_keep_alive_and_never_with_minus_one() -> None:
    pool, engines, _, clock = make_pool(
        WarmConfig(keep_alive_s=10.0), WarmConfig(keep_alive_s=-1.0)
    )
    await run(model(pool, "m0"), "r1")
    clock.now += 9.9
    await pool.sleep_idle()
    assert model(pool, "m0").state is ModelState.AWAKE
    clock.now += 0.1
    await pool.sleep_idle()
    assert model(pool, "m0").state is ModelState.ASLEEP
    assert engines[0].paused
    clock.now += 1e6
    await pool.sleep_idle()
    assert model(pool, "m1").state is ModelState.AWAKE


async def test_keep_alive_zero_sleeps_as_soon_as_idle_and_pinned_never() -> None:
    pool, _, _, _ = make_pool(WarmConfig(keep_alive_s=0.0), WarmConfig(keep_alive_s=0, pinned=True))
    await run(model(pool, "m0"), "r1")
    await run(model(pool, "m1"), "r2")
    await pool.sleep_idle()
    assert model(pool, "m0").state is ModelState.ASLEEP
    assert model(pool, "m1").state is ModelState.AWAKE


async def test_the_background_task_sleeps_a_model_right_after_its_last_request() -> None:
    pool, _, _, _ = make_pool(WarmConfig(keep_alive_s=0.0), idle_check_s=30.0)
    await pool.start()
    try:
        await run(model(pool, "m0"), "r1")
        for _ in range(100):
            if model(pool, "m0").state is ModelState.ASLEEP:
                break
            await asyncio.sleep(0.01)
        assert model(pool, "m0").state is ModelState.ASLEEP  # woken by the request's end
    finally:
        await pool.shutdown()


def test_the_idle_check_runs_often_only_while_a_model_can_sleep_for_being_idle() -> None:
    """Each check is a wake-up of the server's process: with every model kept alive
    for ever (the default) or pinned, it runs every NO_KEEP_ALIVE_CHECK_S only."""
    never, _, _, _ = make_pool(
        WarmConfig(), WarmConfig(keep_alive_s=0.0, pinned=True), idle_check_s=0.5
    )
    assert never._idle_check_interval() == NO_KEEP_ALIVE_CHECK_S
    some, _, _, _ = make_pool(WarmConfig(), WarmConfig(keep_alive_s=60.0), idle_check_s=0.5)
    assert some._idle_check_interval() == 0.5


async def test_a_model_with_a_request_in_flight_does_not_sleep() -> None:
    pool, _, _, clock = make_pool(WarmConfig(keep_alive_s=0.0))
    stream = model(pool, "m0").generate(request("long", tokens=1000))
    await anext(stream)
    clock.now += 100
    await pool.sleep_idle()
    assert model(pool, "m0").state is ModelState.AWAKE
    with pytest.raises(ModelStateConflict, match="in flight"):
        await pool.sleep(model(pool, "m0"))
    await stream.aclose()


async def test_a_request_wakes_a_sleeping_model_and_is_served() -> None:
    pool, engines, sleeper, _ = make_pool(WarmConfig())
    await pool.sleep(model(pool, "m0"))
    assert (model(pool, "m0").state, engines[0].paused) == (ModelState.ASLEEP, True)
    assert await run(model(pool, "m0"), "r1") == 3
    assert (model(pool, "m0").state, engines[0].paused) == (ModelState.AWAKE, False)
    assert (model(pool, "m0").wakes, model(pool, "m0").waiters, len(sleeper.wakes)) == (1, 1, 1)


async def test_concurrent_requests_share_one_wake() -> None:
    pool, _, sleeper, _ = make_pool(WarmConfig(), wake_s=0.05)
    seen: list[tuple[str, str]] = []
    pool.observers.append(lambda what, m, _s: seen.append((what, m.name)))
    sleepy = model(pool, "m0")
    await pool.sleep(sleepy)
    counts = await asyncio.gather(*(run(sleepy, f"r{i}") for i in range(8)))
    assert counts == [3] * 8
    assert len(sleeper.wakes) == 1
    assert (sleepy.wakes, sleepy.waiters) == (1, 8)
    assert seen.count(("waiter", "m0")) == 8
    assert seen.count(("wake", "m0")) == 1


async def test_a_waiter_leaving_does_not_cancel_the_others_wake() -> None:
    pool, _, sleeper, _ = make_pool(WarmConfig(), wake_s=0.05)
    sleepy = model(pool, "m0")
    await pool.sleep(sleepy)
    leaving = asyncio.create_task(run(sleepy, "gone"))
    staying = asyncio.create_task(run(sleepy, "stays"))
    await asyncio.sleep(0.01)
    leaving.cancel()
    assert await staying == 3
    assert sleepy.state is ModelState.AWAKE
    assert len(sleeper.wakes) == 1
    assert sleepy.in_flight == 0


async def test_the_least_recently_used_idle_model_sleeps_to_make_room() -> None:
    pool, _, _, clock = make_pool(
        WarmConfig(memory_gib=4), WarmConfig(memory_gib=4), WarmConfig(memory_gib=4), budget_gib=8
    )
    await pool.start()
    try:
        # The third does not fit beside the first two: it sleeps once loaded.
        assert [m.state for m in pool.models] == [
            ModelState.AWAKE,
            ModelState.AWAKE,
            ModelState.ASLEEP,
        ]
        await run(model(pool, "m1"), "r1")
        clock.now += 1
        await run(model(pool, "m0"), "r2")  # m1 is now the least recently used
        clock.now += 1
        await run(model(pool, "m2"), "r3")
        assert [m.state for m in pool.models] == [
            ModelState.AWAKE,
            ModelState.ASLEEP,
            ModelState.AWAKE,
        ]
    finally:
        await pool.shutdown()


async def test_a_budget_fitting_one_model_swaps_them_per_request() -> None:
    pool, _, _, _ = make_pool(WarmConfig(memory_gib=3), WarmConfig(memory_gib=3), budget_gib=4)
    await pool.start()
    try:
        for name in ("m1", "m0", "m1"):
            assert await run(model(pool, name), f"r-{name}") == 3
            awake = [m.name for m in pool.models if m.state is ModelState.AWAKE]
            assert awake == [name]
    finally:
        await pool.shutdown()


class SlowSleepSleeper(CountingSleeper):
    """Putting a model to sleep takes a while (vLLM's pause waits for the engine)."""

    async def sleep(self, host: ModelHost) -> None:
        await asyncio.sleep(0.05)
        await super().sleep(host)


async def test_a_request_arriving_while_its_model_goes_to_sleep_wakes_it_again() -> None:
    clock = Clock()
    sleeper = SlowSleepSleeper()
    pool = ModelPool(sleeper, budget_gib=4, clock=clock)
    for index in range(2):
        pool.add(ScriptedEngine(served_names=(f"m{index}",)), WarmConfig(memory_gib=3))
    await pool.start()
    try:
        # m1's request makes m0 sleep; m0's request arrives while m0's engine pauses.
        to_m1 = asyncio.create_task(run(model(pool, "m1"), "r-m1"))
        await asyncio.sleep(0.01)
        to_m0 = asyncio.create_task(run(model(pool, "m0"), "r-m0"))
        results = await asyncio.wait_for(asyncio.gather(to_m1, to_m0), 5)
        assert results == [3, 3]
        assert model(pool, "m0").state is ModelState.AWAKE
    finally:
        await pool.shutdown()


async def test_a_model_in_flight_is_never_evicted_and_the_wake_waits_for_it() -> None:
    pool, _, _, _ = make_pool(WarmConfig(memory_gib=3), WarmConfig(memory_gib=3), budget_gib=4)
    await pool.start()
    try:
        busy = model(pool, "m0").generate(request("long", tokens=1000))
        await anext(busy)
        waking = asyncio.create_task(run(model(pool, "m1"), "r1"))
        await asyncio.sleep(0.2)
        assert not waking.done()
        assert model(pool, "m0").state is ModelState.AWAKE
        assert model(pool, "m1").state is ModelState.WAKING
        await busy.aclose()  # m0 idle now: it sleeps and m1 wakes
        assert await waking == 3
        assert [m.state for m in pool.models] == [ModelState.ASLEEP, ModelState.AWAKE]
    finally:
        await pool.shutdown()


async def test_a_wake_that_finds_no_room_in_time_fails_and_the_model_stays_asleep() -> None:
    pool, _, _, _ = make_pool(
        WarmConfig(memory_gib=3, pinned=True),
        WarmConfig(memory_gib=3),
        budget_gib=4,
        wake_wait_s=0.1,
    )
    await pool.start()
    try:
        with pytest.raises(ModelWakeFailed, match="busy or pinned") as failed:
            await run(model(pool, "m1"), "r1")
        assert failed.value.retry_after_s > 0
        assert model(pool, "m1").state is ModelState.ASLEEP
        assert model(pool, "m0").state is ModelState.AWAKE
    finally:
        await pool.shutdown()


async def test_a_model_larger_than_the_budget_fails_its_wake_at_once() -> None:
    pool, _, sleeper, _ = make_pool(
        WarmConfig(memory_gib=1), WarmConfig(memory_gib=9), budget_gib=4
    )
    await pool.start()
    try:
        assert model(pool, "m1").state is ModelState.ASLEEP
        with pytest.raises(ModelWakeFailed, match="needs 9 GiB and the memory budget is 4 GiB"):
            await run(model(pool, "m1"), "r1")
        assert model(pool, "m1").state is ModelState.ASLEEP
        assert sleeper.wakes == []
        assert model(pool, "m1").in_flight == 0
    finally:
        await pool.shutdown()


async def test_a_wake_that_raises_fails_and_a_later_one_succeeds() -> None:
    pool, _, sleeper, _ = make_pool(WarmConfig())
    sleepy = model(pool, "m0")
    await pool.sleep(sleepy)
    sleeper.fail_wake = True
    with pytest.raises(ModelWakeFailed, match="failed to wake"):
        await run(sleepy, "r1")
    assert sleepy.state is ModelState.ASLEEP
    sleeper.fail_wake = False
    assert await run(sleepy, "r2") == 3


async def test_operators_may_not_sleep_a_pinned_model() -> None:
    pool, _, _, _ = make_pool(WarmConfig(pinned=True))
    with pytest.raises(ModelStateConflict, match="pinned"):
        await pool.sleep(model(pool, "m0"))
    assert model(pool, "m0").state is ModelState.AWAKE


class StaticProbe:
    blocking = False

    def __init__(self) -> None:
        self.value = GpuSample()

    def sample(self) -> GpuSample:
        return self.value


async def test_the_owner_reclaim_pauses_every_awake_model_and_the_return_brings_them_back() -> None:
    pool, engines, _, _ = make_pool(WarmConfig(), WarmConfig(), WarmConfig())
    await pool.sleep(model(pool, "m2"))
    host = PoolHost(pool)
    probe = StaticProbe()
    controller = AdmissionController(Policy(grace_s=0.0, resume_after_s=0.0), probe, host)
    probe.value = GpuSample(90.0, 8000.0, 1)
    await controller.observe(probe.value)
    await controller.observe(probe.value)
    assert controller.state is State.YIELDED
    assert [e.paused for e in engines] == [True, True, True]
    assert [e.memory_released for e in engines] == [True, True, False]

    # An operator's wake while yielded is done on return: the engine stays paused now.
    await pool.wake(model(pool, "m2"))
    assert model(pool, "m2").state is ModelState.AWAKE
    assert engines[2].paused

    probe.value = GpuSample()
    for _ in range(3):
        await controller.observe(probe.value)
    assert controller.state is State.SERVING
    assert [e.paused for e in engines] == [False, False, False]
    assert [e.memory_released for e in engines] == [False, False, False]
    served = admitted(controller, model(pool, "m1"), request("after"))
    assert sum([len(o.choices) async for o in served]) == 3


async def test_a_model_asleep_when_the_owner_came_stays_asleep_on_return() -> None:
    pool, engines, _, _ = make_pool(WarmConfig(), WarmConfig())
    await pool.sleep(model(pool, "m1"))
    host = PoolHost(pool)
    await host.pause()
    assert await host.release_memory()
    await host.reacquire_memory()
    await host.resume()
    assert [m.state for m in pool.models] == [ModelState.AWAKE, ModelState.ASLEEP]
    assert [e.paused for e in engines] == [False, True]
    assert not engines[1].memory_released  # its sleep was the sleeper's, untouched
    with pytest.raises(ModelStateConflict, match="yielded"):
        await host.pause()
        await pool.sleep(model(pool, "m0"))
    await host.resume()


async def test_the_host_reports_for_every_model() -> None:
    pool, engines, _, _ = make_pool(WarmConfig(), WarmConfig())
    host = PoolHost(pool)
    assert host.is_ready() and host.is_alive()
    assert host.model.name == "m0"
    engines[1].failed = "core died"
    assert host.failure() == "m1: core died"
    assert not host.is_ready()
