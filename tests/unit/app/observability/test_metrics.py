"""The `lilac_` series: HTTP requests, admission state and effects, the owner's sample,
owner interference, rejections by reason, and bounded per-key counters."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from app.config.settings import Settings
from app.observability.metrics import OTHER, KeyUsage
from engine.admission.probes import GpuSample
from engine.scripted import ScriptedEngine
from tests.client import app_client, provided

URL = "/v1/chat/completions"
BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
OWNER = GpuSample(90.0, 8000.0, 1)
LIGHT_OWNER = GpuSample(10.0, 100.0, 1)


class StaticProbe:
    blocking = False

    def __init__(self) -> None:
        self.value = GpuSample()

    def sample(self) -> GpuSample:
        return self.value


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_http_requests_are_counted_by_route_method_and_status() -> None:
    async with app_client(ScriptedEngine()) as http:
        await http.post(URL, json=BODY)
        await http.post(URL, json={**BODY, "model": "nope"})
        await http.get("/no/such/route")
        scraped = samples((await http.get("/metrics")).text)
    ok = ("lilac_http_requests_total", (("method", "POST"), ("route", URL), ("status", "200")))
    missing = ("lilac_http_requests_total", (("method", "POST"), ("route", URL), ("status", "404")))
    other = ("lilac_http_requests_total", (("method", "GET"), ("route", OTHER), ("status", "404")))
    assert scraped[ok] == 1 and scraped[missing] == 1 and scraped[other] == 1
    count = ("lilac_http_request_duration_seconds_count", (("method", "POST"), ("route", URL)))
    assert scraped[count] == 2


async def test_admission_series_follow_a_reclaim_and_a_return() -> None:
    probe = StaticProbe()
    settings = Settings(grace_period=0.2, resume_after=0.0, owner_light_util=5.0)
    async with app_client(ScriptedEngine(), settings, probe=probe) as http:
        controller = provided(http.app, "admission")
        before = samples((await http.get("/metrics")).text)
        probe.value = LIGHT_OWNER
        await controller.observe(probe.value)
        await asyncio.sleep(0.05)
        await controller.observe(probe.value)  # the owner shared the GPU for >= 50 ms
        probe.value = OWNER
        await controller.observe(probe.value)
        rejected = await http.post(URL, json=BODY)
        during = samples((await http.get("/metrics")).text)
        probe.value = GpuSample()
        await controller.observe(probe.value)
        await controller.observe(probe.value)
        after = samples((await http.get("/metrics")).text)
    assert rejected.status_code == 503
    assert before[("lilac_admission_state", (("state", "serving"),))] == 1
    assert before[("lilac_admission_admitting", ())] == 1
    assert during[("lilac_admission_state", (("state", "yielded"),))] == 1
    assert during[("lilac_admission_admitting", ())] == 0
    assert during[("lilac_owner_gpu_utilization_percent", ())] == 90.0
    assert during[("lilac_owner_gpu_memory_mib", ())] == 8000.0
    assert during[("lilac_admission_yield_seconds_count", ())] == 1
    assert during[("lilac_admission_rejections_total", (("reason", "yielded"),))] == 1
    assert during[("lilac_owner_interference_seconds_total", ())] >= 0.05
    assert after[("lilac_admission_state", (("state", "serving"),))] == 1
    assert after[("lilac_admission_return_seconds_count", ())] == 1
    assert after[("lilac_admission_transitions_total", (("state", "yielded"),))] == 1


async def test_metrics_carry_vllm_registry_too() -> None:
    """/metrics is our registry, then prometheus_client's default one (vLLM's series
    live there; the real-engine test checks them); here its process series."""
    async with app_client(ScriptedEngine()) as http:
        text = (await http.get("/metrics")).text
    assert "lilac_engine_ready 1.0" in text
    assert "process_cpu_seconds_total" in text or "python_info" in text


def test_key_usage_labels_stay_bounded() -> None:
    keys = KeyUsage(CollectorRegistry(), max_keys=2)
    for key_id in ("k1", "k2", "k3", "k4", "k1"):
        keys.count(key_id, prompt_tokens=10, completion_tokens=1)
    assert keys.requests.labels("k1")._value.get() == 2
    assert keys.requests.labels(OTHER)._value.get() == 2
    assert keys.prompt_tokens.labels(OTHER)._value.get() == 20
    labels = {s.labels["key"] for m in keys.requests.collect() for s in m.samples}
    assert labels == {"k1", "k2", OTHER}


async def test_liveness_stays_200_while_yielded_and_readiness_does_not() -> None:
    probe = StaticProbe()
    settings = Settings(grace_period=0.1, resume_after=60.0)
    async with app_client(ScriptedEngine(), settings, probe=probe) as http:
        assert (await http.get("/health")).status_code == 200
        probe.value = OWNER
        await provided(http.app, "admission").observe(OWNER)
        ready = await http.get("/health")
        live = await http.get("/health/live")
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "yielded"
    assert ready.headers["retry-after"]
    assert live.status_code == 200
    assert live.json() == {"status": "alive", "state": "yielded"}


async def test_liveness_fails_once_the_engine_has_died() -> None:
    engine = ScriptedEngine()
    engine.is_alive = lambda: False  # type: ignore[method-assign]
    async with app_client(engine) as http:
        response = await http.get("/health/live")
    assert response.status_code == 503
    assert response.json()["error"]["type"]


async def test_keyed_requests_are_counted_through_app_state() -> None:
    async with app_client(ScriptedEngine()) as http:
        http.app.state.metrics.keys.count("key_1", prompt_tokens=7, completion_tokens=3)
        scraped = samples((await http.get("/metrics")).text)
    assert scraped[("lilac_key_requests_total", (("key", "key_1"),))] == 1
    assert scraped[("lilac_key_prompt_tokens_total", (("key", "key_1"),))] == 7
    assert scraped[("lilac_key_completion_tokens_total", (("key", "key_1"),))] == 3
