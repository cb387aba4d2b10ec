"""Several models in one server, through two real vLLM engines: the package's SmolLM2
engine and its family-test engine as the second model (the same weights with the
family-test tokenizer, built for the `kimi_k2` family, under another name, with vLLM's
stat logger as the server builds every model; tests/integration/family_engine.py). The
pause stand-in sleeps and wakes them (vLLM's CPU build has no sleep mode). Covered:
routing by model, sleep after keep_alive, wake on request, one wake for concurrent
requests, the LRU rule under a budget that fits one model, a wake that fails, a request
failing the engine's checks waking nothing, a client's wakes limited, every model
yielding to the owner and coming back, and each model admitted against its own engine's
cap and KV budget."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config.settings import Settings
from engine.admission.lease import admitted
from engine.admission.policy import State
from engine.admission.probes import GpuSample
from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import VLLMEngine
from engine.warm.model import ModelState, WarmConfig, WarmModel
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper
from engine.warm.wakes import WakeBudget
from tests.client import AppClient, app_client, provided
from tests.integration.family_engine import FAMILY_MAX_MODEL_LEN, ForcedOutputEngine
from tests.integration.family_engine import FAMILY_MODEL as SECOND

URL = "/v1/chat/completions"
OWNER, IDLE = GpuSample(90.0, 8000.0, 1), GpuSample()


class StaticProbe:
    blocking = False

    def sample(self) -> GpuSample:
        return IDLE


@pytest.fixture(scope="module")
async def pool(
    real_engine: VLLMEngine, family_engine: ForcedOutputEngine
) -> AsyncIterator[ModelPool]:
    family_engine.reset()  # the family tests rebind it: serve it as built, nothing forced
    pool = ModelPool(PauseSleeper(), idle_check_s=0.2, wake_wait_s=2.0)
    pool.add(real_engine)
    pool.add(family_engine)
    pool.start_idle_checks()
    yield pool
    await pool.stop_idle_checks()
    # Both engines serve other modules: leave them awake and resumed.
    for model in pool.models:
        await pool.wake(model)


@pytest.fixture
async def http(pool: ModelPool) -> AsyncIterator[AppClient]:
    """Every test starts with both models awake, never sleeping, no budget."""
    pool.budget_gib = None
    for model in pool.models:
        model.config = WarmConfig()
        await pool.wake(model)
    settings = Settings(grace_period=0.0, resume_after=0.0)
    async with app_client(None, settings, models=pool, probe=StaticProbe(), timeout=120) as c:
        yield c


def first(pool: ModelPool) -> WarmModel:
    return pool.models[0]


def second(pool: ModelPool) -> WarmModel:
    return pool.models[1]


async def paused(model: WarmModel) -> bool:
    return bool(await model.engine._llm.is_paused())  # type: ignore[attr-defined]


def body(model: str, **fields: object) -> dict[str, object]:
    messages = [{"role": "user", "content": "Say hi."}]
    return {"model": model, "messages": messages, "max_tokens": 2, "temperature": 0, **fields}


async def chat(http: httpx.AsyncClient, model: str) -> httpx.Response:
    response = await http.post(URL, json=body(model))
    assert response.status_code == 200, response.text
    return response


async def test_the_openai_client_reaches_each_model_by_name(
    http: AppClient, pool: ModelPool
) -> None:
    sdk = openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key="unused", http_client=http, max_retries=0
    )
    listed = {m.id: m.model_extra for m in (await sdk.models.list()).data}
    assert listed[DEFAULT_MODEL_NAME]["state"] == "awake"  # type: ignore[index]
    assert (listed[SECOND]["state"], listed[SECOND]["family"]) == ("awake", "kimi_k2")  # type: ignore[index]
    assert listed[SECOND]["max_model_len"] == FAMILY_MAX_MODEL_LEN  # type: ignore[index]
    messages = [{"role": "user", "content": "Say hi."}]
    for name in (DEFAULT_MODEL_NAME, SECOND):
        completion = await sdk.chat.completions.create(
            model=name,
            messages=messages,
            max_tokens=2,
            temperature=0,  # type: ignore[arg-type]
        )
        assert completion.model == name
        assert completion.usage is not None
        # Each model renders with its own template: the prompt is what its tokenizer
        # and template make of the messages, and the two differ.
        counted = await http.post("/tokenize", json={"model": name, "messages": messages})
        assert completion.usage.prompt_tokens == counted.json()["count"]
    counts = [
        (await http.post("/tokenize", json={"model": n, "messages": messages})).json()["count"]
        for n in (DEFAULT_MODEL_NAME, SECOND)
    ]
    assert counts[0] != counts[1]
    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="nope", messages=messages, max_tokens=2)  # type: ignore[arg-type]
    # Each model's engine counted its own request in vLLM's series, under its name.
    scrape = (await http.get("/metrics")).text
    finished: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape):
        if family.name == "vllm:request_success":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    name = sample.labels["model_name"]
                    finished[name] = finished.get(name, 0.0) + sample.value
    assert finished.get(DEFAULT_MODEL_NAME, 0) >= 1 and finished.get(SECOND, 0) >= 1, finished


async def test_a_model_sleeps_after_keep_alive_and_a_request_wakes_it(
    http: AppClient, pool: ModelPool
) -> None:
    second(pool).config = WarmConfig(keep_alive_s=1.0)
    await chat(http, SECOND)
    deadline = time.monotonic() + 10
    while second(pool).state is not ModelState.ASLEEP and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert second(pool).state is ModelState.ASLEEP
    assert await paused(second(pool))
    assert first(pool).state is ModelState.AWAKE  # keep_alive -1: never sleeps

    wakes = second(pool).wakes
    second(pool).config = WarmConfig()  # so that it stays awake to be looked at
    response = await chat(http, SECOND)
    assert response.json()["usage"]["completion_tokens"] >= 1
    assert second(pool).wakes == wakes + 1
    assert second(pool).state is ModelState.AWAKE
    assert not await paused(second(pool))


async def test_concurrent_requests_share_one_wake(http: AppClient, pool: ModelPool) -> None:
    await pool.sleep(second(pool))
    wakes, waiters = second(pool).wakes, second(pool).waiters
    # A CPU wake is an unpause that ends in milliseconds, so the wake is held until all
    # eight have arrived: otherwise a late one finds the model awake and never waits.
    inner, arrived = pool.sleeper, asyncio.Event()

    class HeldSleeper:
        def __getattr__(self, name: str) -> object:
            return getattr(inner, name)

        async def wake(self, engine: object) -> None:
            await arrived.wait()
            await inner.wake(engine)  # type: ignore[arg-type]

    pool.sleeper = HeldSleeper()  # type: ignore[assignment]
    try:
        sent = [asyncio.create_task(http.post(URL, json=body(SECOND))) for _ in range(8)]
        deadline = time.monotonic() + 30
        while second(pool).waiters < waiters + 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        arrived.set()
        responses = await asyncio.gather(*sent)
    finally:
        pool.sleeper = inner
    assert [r.status_code for r in responses] == [200] * 8
    assert (second(pool).wakes, second(pool).waiters) == (wakes + 1, waiters + 8)
    assert second(pool).engine.unfinished_requests() == 0


async def test_a_budget_fitting_one_model_sleeps_the_least_recently_used(
    http: AppClient, pool: ModelPool
) -> None:
    for model in pool.models:
        model.config = WarmConfig(memory_gib=1.0)
    pool.budget_gib = 1.5
    await pool.sleep(second(pool))
    await chat(http, SECOND)
    assert [m.state for m in pool.models] == [ModelState.ASLEEP, ModelState.AWAKE]
    assert await paused(first(pool))
    await chat(http, DEFAULT_MODEL_NAME)
    assert [m.state for m in pool.models] == [ModelState.AWAKE, ModelState.ASLEEP]
    assert await paused(second(pool)) and not await paused(first(pool))


async def test_a_model_in_flight_is_not_put_to_sleep_for_another(
    http: AppClient, pool: ModelPool
) -> None:
    for model in pool.models:
        model.config = WarmConfig(memory_gib=1.0)
    pool.budget_gib = 1.5
    await pool.sleep(second(pool))
    long = GenerateRequest(
        "warm-long",
        SamplingOptions(max_tokens=200, ignore_eos=True),
        messages=[{"role": "user", "content": "Tell a story."}],
    )
    async with aclosing(first(pool).generate(long)) as streaming:
        await anext(streaming)
        # The first model is busy: the second's wake waits (2 s at most), then fails.
        failed = await http.post(URL, json=body(SECOND))
        assert failed.status_code == 503
        assert failed.json()["error"]["code"] == "model_wake_failed"
        assert "busy or pinned" in failed.json()["error"]["message"]
        assert first(pool).state is ModelState.AWAKE
        await anext(streaming)  # still generating
    assert second(pool).state is ModelState.ASLEEP
    assert first(pool).engine.unfinished_requests() == 0


async def test_a_model_larger_than_the_budget_fails_to_wake_and_stays_listed(
    http: AppClient, pool: ModelPool
) -> None:
    second(pool).config = WarmConfig(memory_gib=8.0)
    pool.budget_gib = 4.0
    await pool.sleep(second(pool))
    failed = await http.post(URL, json=body(SECOND, stream=True))
    assert failed.status_code == 503
    assert int(failed.headers["retry-after"]) >= 1
    assert failed.json()["error"]["code"] == "model_wake_failed"
    states = {c["id"]: c["state"] for c in (await http.get("/v1/models")).json()["data"]}
    assert states == {DEFAULT_MODEL_NAME: "awake", SECOND: "asleep"}
    assert second(pool).engine.unfinished_requests() == 0
    assert await paused(second(pool))


async def test_every_model_yields_to_the_owner_and_the_awake_ones_come_back(
    http: AppClient, pool: ModelPool
) -> None:
    await pool.sleep(second(pool))
    admission = provided(http.app, "admission")
    await admission.observe(OWNER)
    await admission.observe(OWNER)
    assert admission.state is State.YIELDED
    assert await paused(first(pool)) and await paused(second(pool))
    refused = await http.post(URL, json=body(DEFAULT_MODEL_NAME))
    assert refused.status_code == 503

    await admission.observe(IDLE)
    await admission.observe(IDLE)
    assert admission.state is State.SERVING
    assert not await paused(first(pool))
    assert second(pool).state is ModelState.ASLEEP  # asleep before the owner came
    assert await paused(second(pool))
    await chat(http, DEFAULT_MODEL_NAME)
    await chat(http, SECOND)  # and a request still wakes it
    assert not await paused(second(pool))


async def test_a_request_that_fails_the_engines_checks_wakes_no_model(
    http: AppClient, pool: ModelPool
) -> None:
    await pool.sleep(second(pool))
    wakes = second(pool).wakes
    too_long = " ".join(["memo"] * (FAMILY_MAX_MODEL_LEN + 100))  # over its context
    messages = [{"role": "user", "content": too_long}]
    failed = await http.post(URL, json=body(SECOND, messages=messages))
    assert failed.status_code == 400, failed.text
    assert failed.json()["error"]["code"] == "context_length_exceeded"
    assert second(pool).state is ModelState.ASLEEP and second(pool).wakes == wakes
    assert await paused(second(pool))
    assert second(pool).in_flight == 0


async def test_a_client_cannot_make_two_models_evict_each_other_in_a_loop(
    http: AppClient, pool: ModelPool
) -> None:
    for model in pool.models:
        model.config = WarmConfig(memory_gib=1.0)
    pool.budget_gib = 1.5
    await pool.sleep(second(pool))
    pool.wake_budget = WakeBudget(2, pool.clock)
    try:
        answers = [
            await http.post(URL, json=body(name, user="looper"))
            for name in (SECOND, DEFAULT_MODEL_NAME, SECOND)
        ]
        assert [r.status_code for r in answers] == [200, 200, 429]
        assert answers[-1].json()["error"]["code"] == "wake_limit_exceeded"
        assert [m.state for m in pool.models] == [ModelState.AWAKE, ModelState.ASLEEP]
        other = await http.post(URL, json=body(SECOND, user="someone-else"))
        assert other.status_code == 200, other.text
    finally:
        pool.wake_budget = WakeBudget(None, pool.clock)


async def test_a_request_for_one_model_runs_while_the_others_cap_is_full(
    pool: ModelPool,
) -> None:
    """Each engine has its own cap (here 1) and KV budget (its own KV cache): with the
    first model's cap taken by a long generation and a request queued for it, a request
    for the second model is admitted at once and answered."""
    pool.budget_gib = None
    for model in pool.models:
        model.config = WarmConfig()
        await pool.wake(model)
    settings = Settings(grace_period=0.0, resume_after=0.0, max_concurrent=1)
    async with app_client(None, settings, models=pool, probe=StaticProbe(), timeout=120) as http:
        admission = provided(http.app, "admission")
        long = GenerateRequest(
            "permodel-long",
            SamplingOptions(max_tokens=400, ignore_eos=True),
            messages=[{"role": "user", "content": "Tell a story."}],
            client="flood",
        )
        async with aclosing(admitted(admission, first(pool), long)) as streaming:
            await anext(streaming)  # the first model's one slot is taken
            queued = asyncio.create_task(http.post(URL, json=body(DEFAULT_MODEL_NAME)))
            loads = admission.queue.models
            for _ in range(200):
                if loads[DEFAULT_MODEL_NAME].waiting == 1:
                    break
                await asyncio.sleep(0.01)
            assert loads[DEFAULT_MODEL_NAME].waiting == 1
            answer = await http.post(URL, json=body(SECOND))
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == SECOND
            assert not queued.done()  # still waiting for the first model's slot
            assert loads[DEFAULT_MODEL_NAME].running == 1
            status = admission.snapshot()["models"]
            kv = {name: status[name]["kv_budget_tokens"] for name in status}
            assert kv[DEFAULT_MODEL_NAME] == first(pool).model.kv_cache_tokens > 0
            assert kv[SECOND] == second(pool).model.kv_cache_tokens > 0
            await anext(streaming)  # the long generation still runs
        assert (await queued).status_code == 200  # its slot came back when the stream closed
    assert first(pool).engine.unfinished_requests() == 0
