"""Admission per model, over two scripted engines in one app: a request for one model
runs while the other model's cap is full and its queue long, `/admin/admission` and
`/metrics` show each model's running, queue and KV budget, and a drain stops both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config.settings import Settings
from engine.admission.probes import GpuSample
from engine.admission.runtime import AdmissionController
from engine.scripted import ScriptedEngine
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper
from tests.client import AppClient, app_client, provided

URL = "/v1/chat/completions"
ADMIN = {"Authorization": "Bearer sesame"}


class StaticProbe:
    blocking = False

    def sample(self) -> GpuSample:
        return GpuSample()


@pytest.fixture
async def served() -> AsyncIterator[tuple[AppClient, AdmissionController]]:
    pool = ModelPool(PauseSleeper())
    slow = ScriptedEngine(("x",) * 40, served_names=("A",), token_delay_s=0.02, kv_cache_tokens=900)
    fast = ScriptedEngine(("y",), served_names=("B",), kv_cache_tokens=4000)
    pool.add(slow)
    pool.add(fast)
    settings = Settings(admin_key="sesame", max_concurrent=1, resume_after=0.0, grace_period=0.1)
    async with app_client(None, settings, models=pool, probe=StaticProbe()) as http:
        yield http, provided(http.app, "admission")


def chat(model: str, user: str) -> dict[str, object]:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": model, "messages": messages, "max_tokens": 40, "user": user}


async def until(condition: object, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


def gauges(scrape: str) -> dict[tuple[str, str], float]:
    found = {}
    for family in text_string_to_metric_families(scrape):
        if family.name.startswith("lilac_admission_model_"):
            for sample in family.samples:
                found[(sample.name, sample.labels["model_name"])] = sample.value
    return found


async def test_a_request_for_b_runs_while_as_cap_is_full_and_its_queue_long(
    served: tuple[AppClient, AdmissionController],
) -> None:
    http, admission = served
    burst = [asyncio.create_task(http.post(URL, json=chat("A", f"u{i}"))) for i in range(4)]
    models = admission.queue.models
    await until(lambda: "A" in models and models["A"].running == 1 and models["A"].waiting == 3)

    answer = await http.post(URL, json=chat("B", "b"))  # B's own cap: it runs at once
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "y"
    assert not any(task.done() for task in burst[1:])  # A's queue still waits

    status = (await http.get("/admin/admission", headers=ADMIN)).json()
    assert status["models"]["A"]["running"] == 1 and status["models"]["A"]["queued"] == 3
    assert status["models"]["A"]["kv_budget_tokens"] == 900  # each engine's own KV cache
    assert status["models"]["B"] == {
        "running": 0,
        "queued": 0,
        "concurrency_cap": 1,
        "kv_budget_tokens": 4000,
        "kv_tokens_in_use": 0,
    }
    seen = gauges((await http.get("/metrics")).text)
    assert seen[("lilac_admission_model_queue_depth", "A")] == 3
    assert seen[("lilac_admission_model_running", "A")] == 1
    assert seen[("lilac_admission_model_queue_depth", "B")] == 0
    assert seen[("lilac_admission_model_kv_budget_tokens", "B")] == 4000
    assert seen[("lilac_admission_model_kv_tokens_in_use", "A")] > 0

    assert [r.status_code for r in await asyncio.gather(*burst)] == [200] * 4


async def test_a_drain_stops_every_model(served: tuple[AppClient, AdmissionController]) -> None:
    http, admission = served
    assert (await http.post(URL, json=chat("B", "b"))).status_code == 200
    assert (await http.post("/admin/admission/drain", headers=ADMIN)).status_code == 200
    for model in ("A", "B"):
        refused = await http.post(URL, json=chat(model, "b"))
        assert refused.status_code == 503, refused.text
    assert admission.deferred_room() == 0
    assert (await http.post("/admin/admission/resume", headers=ADMIN)).status_code == 200
    assert (await http.post(URL, json=chat("A", "b"))).status_code == 200
