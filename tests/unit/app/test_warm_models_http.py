"""Several models behind one app (scripted engines): routing by `model`, states in
/v1/models, a request that wakes a model, a wake that fails (503 + Retry-After, the
model still listed), the admin routes and the per-model metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.config.settings import Settings
from engine.scripted import ScriptedEngine
from engine.warm.model import ModelState, WarmConfig
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper
from tests.client import AppClient, app_client

ADMIN = {"Authorization": "Bearer admin-key"}


@pytest.fixture
async def served() -> AsyncIterator[tuple[AppClient, ModelPool, list[ScriptedEngine]]]:
    pool = ModelPool(PauseSleeper(), budget_gib=4)
    engines = [
        ScriptedEngine(("a",), served_names=("small", "small-alias"), max_model_len=512),
        ScriptedEngine(("b",), served_names=("other",), max_model_len=1024),
        ScriptedEngine(("c",), served_names=("huge",)),
    ]
    pool.add(engines[0], WarmConfig(memory_gib=3, pinned=True))
    pool.add(engines[1], WarmConfig(memory_gib=1))
    pool.add(engines[2], WarmConfig(memory_gib=9))
    await pool.sleep(pool.models[1])
    pool.models[2].state = ModelState.ASLEEP  # as `start` leaves a model over the budget
    async with app_client(None, Settings(admin_key="admin-key"), models=pool) as http:
        yield http, pool, engines


def chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def test_models_lists_every_model_with_its_state(served: tuple) -> None:
    http, _, _ = served
    cards = (await http.get("/v1/models")).json()["data"]
    assert [(c["id"], c["state"], c["max_model_len"]) for c in cards] == [
        ("small", "awake", 512),
        ("small-alias", "awake", 512),
        ("other", "asleep", 1024),
        ("huge", "asleep", 2048),
    ]


async def test_a_request_goes_to_the_model_it_names_and_wakes_it(served: tuple) -> None:
    http, pool, engines = served
    first = await http.post("/v1/chat/completions", json=chat("small-alias"))
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == "a"
    woken = await http.post("/v1/chat/completions", json=chat("other"))
    assert woken.status_code == 200, woken.text
    assert woken.json()["choices"][0]["message"]["content"] == "b"
    assert woken.json()["model"] == "other"
    assert pool.models[1].state is ModelState.AWAKE
    assert [len(e.requests) for e in engines] == [1, 1, 0]
    missing = await http.post("/v1/completions", json={"model": "nope", "prompt": "x"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


async def test_a_wake_that_fails_is_a_503_with_retry_after_and_the_model_stays_listed(
    served: tuple,
) -> None:
    http, _, engines = served
    failed = await http.post("/v1/chat/completions", json={**chat("huge"), "stream": True})
    assert failed.status_code == 503
    assert int(failed.headers["retry-after"]) >= 1
    error = failed.json()["error"]
    assert error["code"] == "model_wake_failed"
    assert "needs 9 GiB and the memory budget is 4 GiB" in error["message"]
    cards = {c["id"]: c["state"] for c in (await http.get("/v1/models")).json()["data"]}
    assert cards["huge"] == "asleep"
    assert engines[2].unfinished_requests() == 0


async def test_tokenize_uses_the_named_models_tokenizer(served: tuple) -> None:
    http, _, _ = served
    counted = await http.post("/tokenize", json={"model": "other", "prompt": "one two"})
    assert counted.json()["max_model_len"] == 1024
    missing = await http.post("/tokenize", json={"model": "nope", "prompt": "x"})
    assert missing.status_code == 404


async def test_admin_routes_sleep_and_wake_a_model(served: tuple) -> None:
    http, pool, _ = served
    assert (await http.post("/admin/models/other/wake")).status_code == 401
    woken = await http.post("/admin/models/other/wake", headers=ADMIN)
    assert (woken.status_code, woken.json()["state"]) == (200, "awake")
    slept = await http.post("/admin/models/other/sleep", headers=ADMIN)
    assert (slept.status_code, slept.json()["state"]) == (200, "asleep")
    pinned = await http.post("/admin/models/small/sleep", headers=ADMIN)
    assert pinned.status_code == 409
    assert pinned.json()["error"]["code"] == "model_state_conflict"
    too_big = await http.post("/admin/models/huge/wake", headers=ADMIN)
    assert (too_big.status_code, too_big.json()["error"]["code"]) == (503, "model_wake_failed")
    assert (await http.post("/admin/models/nope/wake", headers=ADMIN)).status_code == 404
    listing = (await http.get("/admin/models", headers=ADMIN)).json()
    assert listing["budget_gib"] == 4
    assert [m["state"] for m in listing["data"]] == ["awake", "asleep", "asleep"]
    assert pool.models[1].waiters == 0  # operators' wakes are not requests waiting


async def test_metrics_per_model(served: tuple) -> None:
    http, _, _ = served
    await http.post("/v1/chat/completions", json=chat("other"))
    text = (await http.get("/metrics")).text
    assert 'lilac_model_state{model="other",state="awake"} 1.0' in text
    assert 'lilac_model_state{model="huge",state="asleep"} 1.0' in text
    assert 'lilac_model_wakes_total{model="other"} 1.0' in text
    assert 'lilac_model_wake_waiters_total{model="other"} 1.0' in text
    assert 'lilac_model_wake_seconds_count{model="other"} 1.0' in text


MEMORY_1 = WarmConfig(memory_gib=1.0)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def evicting() -> AsyncIterator[tuple[AppClient, ModelPool, ManualClock]]:
    """Two models and a budget that fits one: every wake sleeps the other. Each client
    may start two wakes a minute."""
    clock = ManualClock()
    pool = ModelPool(PauseSleeper(), budget_gib=1.5, wakes_per_client_per_minute=2, clock=clock)
    pool.add(ScriptedEngine(("a",), served_names=("one",), max_model_len=64), MEMORY_1)
    pool.add(ScriptedEngine(("b",), served_names=("two",), max_model_len=64), MEMORY_1)
    pool.add(ScriptedEngine(("c",), served_names=("three",), max_model_len=64), MEMORY_1)
    await pool.sleep(pool.models[1])
    await pool.sleep(pool.models[2])
    async with app_client(None, Settings(), models=pool) as http:
        yield http, pool, clock


def states(pool: ModelPool) -> list[str]:
    return [str(m.state) for m in pool.models]


async def test_a_request_that_fails_its_checks_wakes_no_model(evicting: tuple) -> None:
    http, pool, _ = evicting
    too_long = " ".join(["word"] * 100)  # over the 64-token context of either model
    bad = [
        {**chat("two"), "messages": [{"role": "user", "content": too_long}]},
        {**chat("two"), "max_tokens": 1000},
        {"model": "two", "prompt": too_long, "max_tokens": 1},
        {"model": "two", "prompt": [[5000]], "max_tokens": 1},  # outside the vocabulary
        {**chat("two"), "response_format": {"type": "json_schema"}},
    ]
    for body in bad * 2:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        response = await http.post(path, json=body)
        assert response.status_code == 400, response.text
    assert states(pool) == ["awake", "asleep", "asleep"]
    assert [m.wakes for m in pool.models] == [0, 0, 0]
    assert [m.in_flight for m in pool.models] == [0, 0, 0]
    woken = await http.post("/v1/chat/completions", json={**chat("two"), "user": "x"})
    assert woken.status_code == 200, woken.text
    assert states(pool) == ["asleep", "awake", "asleep"]


async def test_a_client_that_has_used_its_wakes_gets_a_429_and_others_still_wake(
    evicting: tuple,
) -> None:
    http, pool, clock = evicting
    alternating = ["two", "one", "two"]
    answers = [
        await http.post("/v1/chat/completions", json={**chat(name), "user": "a"})
        for name in alternating
    ]
    assert [r.status_code for r in answers] == [200, 200, 429]
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "wake_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_exceeded"
    assert 29 <= int(refused.headers["retry-after"]) <= 31  # one wake back every 30 s
    assert states(pool) == ["awake", "asleep", "asleep"]  # the refused wake did not happen
    # A model that is awake costs no wake.
    assert (await http.post("/v1/chat/completions", json={**chat("one"), "user": "a"})).is_success
    # Another client's wakes are its own.
    other = await http.post("/v1/chat/completions", json={**chat("three"), "user": "b"})
    assert other.status_code == 200, other.text
    clock.now += 30.0
    again = await http.post("/v1/chat/completions", json={**chat("two"), "user": "a"})
    assert again.status_code == 200, again.text
    assert sum(m.wakes for m in pool.models) == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_prefer_awake_elsewhere_refuses_the_first_attempt_then_wakes(stream: bool) -> None:
    pool = ModelPool(PauseSleeper(), prefer_awake_elsewhere=True)
    pool.add(ScriptedEngine(("b",), served_names=("other",)), WarmConfig())
    await pool.sleep(pool.models[0])
    body = {**chat("other"), "stream": stream}
    async with app_client(None, Settings(), models=pool) as http:
        first = await http.post("/v1/chat/completions", json=body)
        assert first.status_code == 429, first.text  # before any stream: a router retries
        assert first.json()["error"]["code"] == "model_asleep_here"
        assert first.headers["retry-after"] == "1"
        assert pool.models[0].state is ModelState.ASLEEP  # not woken by it
        other = await http.post("/v1/chat/completions", json={**body, "user": "someone"})
        assert other.status_code == 429  # another body: another request
        again = await http.post("/v1/chat/completions", json=body)  # the router came back
        assert again.status_code == 200, again.text
        assert pool.models[0].state is ModelState.AWAKE
        awake = await http.post("/v1/chat/completions", json={**body, "user": "someone"})
        assert awake.status_code == 200  # awake: served at once
