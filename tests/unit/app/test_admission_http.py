"""What clients and operators see of the admission controller, over the scripted engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from app.config.settings import Settings
from engine.admission.policy import State
from engine.admission.probes import GpuSample
from engine.admission.runtime import AdmissionController
from engine.scripted import ScriptedEngine
from tests.client import app_client, provided, stream_events

URL = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]
ADMIN = {"Authorization": "Bearer sesame"}
OWNER = GpuSample(90.0, 8000.0, 1)


class StaticProbe:
    blocking = False

    def __init__(self) -> None:
        self.value = GpuSample()

    def sample(self) -> GpuSample:
        return self.value


class Harness:
    def __init__(
        self, http: httpx.AsyncClient, controller: AdmissionController, engine: ScriptedEngine
    ) -> None:
        self.http = http
        self.controller = controller
        self.engine = engine


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    engine = ScriptedEngine(token_delay_s=0.01)
    settings = Settings(
        admin_key="sesame",
        grace_period=0.2,
        resume_after=0.0,
        max_concurrent=1,
        max_queued=4,  # one place held back for clients with nothing queued
        queue_timeout=5.0,
    )
    async with app_client(engine, settings, probe=StaticProbe()) as http:
        yield Harness(http, provided(http.app, "admission"), engine)


def chat(**fields: object) -> dict:
    return {"model": "scripted", "messages": USER, **fields}


def assert_retry(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert int(response.headers["retry-after"]) >= 1
    assert error["retry_after"] == int(response.headers["retry-after"])
    return error


async def test_yielded_server_answers_503_with_retry_after(harness: Harness) -> None:
    await harness.controller.observe(OWNER)
    assert harness.controller.state is State.YIELDED
    assert_retry(await harness.http.post(URL, json=chat()), 503, "yielded")
    health = await harness.http.get("/health")
    assert_retry(health, 503, "yielded")
    await harness.controller.observe(GpuSample())  # resume_after 0: back at once
    assert (await harness.http.get("/health")).json() == {"status": "ok"}
    assert (await harness.http.post(URL, json=chat())).status_code == 200


async def _until_queued(harness: Harness, count: int) -> None:
    for _ in range(200):
        if len(harness.controller.queue.waiting) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {count} queued")


async def test_a_client_alone_may_fill_the_queue_but_not_the_held_back_place(
    harness: Harness,
) -> None:
    long = chat(max_tokens=40, ignore_eos=True, user="alice")
    tasks = [asyncio.create_task(harness.http.post(URL, json=long)) for _ in range(4)]
    await _until_queued(harness, 3)  # one runs, three wait: no fair share while alone
    assert harness.controller.counters["rejected"] == 0
    assert_retry(await harness.http.post(URL, json=long), 503, "queue_full")
    # Bob has nothing queued: the held-back place is his.
    bob = asyncio.create_task(harness.http.post(URL, json=chat(user="bob")))
    await _until_queued(harness, 4)
    for task in tasks:
        task.cancel()
    assert (await bob).status_code == 200
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_client_over_its_fair_share_gets_429_once_another_waits(harness: Harness) -> None:
    long = chat(max_tokens=40, ignore_eos=True, user="alice")
    running = asyncio.create_task(harness.http.post(URL, json=long))
    queued = [asyncio.create_task(harness.http.post(URL, json=long)) for _ in range(2)]
    await _until_queued(harness, 2)
    other = asyncio.create_task(harness.http.post(URL, json=chat(user="bob")))
    await _until_queued(harness, 3)
    # Bob waits too and the open part is full: alice holds more than her part.
    response = await harness.http.post(URL, json=long)
    error = assert_retry(response, 429, "over_fair_share")
    assert error["type"] == "rate_limit_exceeded"
    # A third client has nothing queued: it takes the held-back place ...
    carol = asyncio.create_task(harness.http.post(URL, json=chat(user="carol")))
    await _until_queued(harness, 4)
    # ... and then the queue is full.
    assert_retry(await harness.http.post(URL, json=chat(user="dave")), 503, "queue_full")
    tasks = [running, *queued, other, carol]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_bearer_key_is_the_fairness_key_over_user(harness: Harness) -> None:
    long = chat(max_tokens=40, ignore_eos=True)
    key = {"Authorization": "Bearer client-key"}
    tasks = [
        asyncio.create_task(harness.http.post(URL, json={**long, "user": u}, headers=key))
        for u in ("a", "b", "c")
    ]
    await _until_queued(harness, 2)
    tasks.append(asyncio.create_task(harness.http.post(URL, json=chat(user="bob"))))
    await _until_queued(harness, 3)
    # Different `user`, same key: one client, over its share.
    response = await harness.http.post(URL, json={**long, "user": "d"}, headers=key)
    assert_retry(response, 429, "over_fair_share")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_stream_ended_by_draining_gets_an_error_event_then_done(harness: Harness) -> None:
    request = chat(stream=True, max_tokens=1000, ignore_eos=True)
    streaming = asyncio.create_task(harness.http.post(URL, json=request))
    await asyncio.sleep(0.1)
    await harness.controller.observe(OWNER)  # drain; grace 0.2 s
    await asyncio.sleep(0.25)
    await harness.controller.observe(OWNER)  # grace over: end it
    response = await streaming
    assert response.status_code == 200
    events = stream_events(response, allow_error=True)  # ends in data: [DONE]
    error = events[-1]["error"]
    assert (error["code"], error["type"]) == ("draining", "service_unavailable")
    assert error["retry_after"] >= 1
    content = events[:-1]
    assert content and all(c["choices"][0]["finish_reason"] is None for c in content)
    assert harness.engine.unfinished_requests() == 0


async def test_non_stream_ended_by_draining_is_503(harness: Harness) -> None:
    plain = asyncio.create_task(harness.http.post(URL, json=chat(max_tokens=1000, ignore_eos=True)))
    await asyncio.sleep(0.1)
    await harness.http.post("/admin/admission/drain", headers=ADMIN)
    await asyncio.sleep(0.25)
    await harness.controller.observe(GpuSample())
    assert_retry(await plain, 503, "draining")
    assert harness.controller.state is State.YIELDED


async def test_admin_routes_need_the_key(harness: Harness) -> None:
    assert (await harness.http.get("/admin/admission")).status_code == 401
    bad = await harness.http.get("/admin/admission", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "authentication_error"
    status = (await harness.http.get("/admin/admission", headers=ADMIN)).json()
    assert status["state"] == "serving"
    assert {"queued", "running", "counters", "gpu", "concurrency_cap"} <= set(status)


async def test_admin_drain_and_resume(harness: Harness) -> None:
    drained = (await harness.http.post("/admin/admission/drain", headers=ADMIN)).json()
    assert drained["state"] == "yielded"
    assert drained["operator_drain"] is True
    assert harness.engine.paused
    assert (await harness.http.get("/health")).status_code == 503
    resumed = (await harness.http.post("/admin/admission/resume", headers=ADMIN)).json()
    assert resumed["state"] == "serving"
    assert not harness.engine.paused
    assert (await harness.http.post(URL, json=chat())).status_code == 200


async def test_admin_routes_are_forbidden_without_a_configured_key() -> None:
    async with app_client(ScriptedEngine(), Settings(), probe=StaticProbe()) as http:
        response = await http.post("/admin/admission/drain", headers=ADMIN)
        assert response.status_code == 403
        assert "--admin-key" in response.json()["error"]["message"]
        assert provided(http.app, "admission").state is State.SERVING


async def test_priority_is_clamped_to_the_public_floor(harness: Harness) -> None:
    """Without keys no request may jump the queue: priority -5 runs at 0; asking to go
    later (5) is kept."""
    response = await harness.http.post(URL, json=chat(priority=-5))
    assert response.status_code == 200
    assert harness.engine.requests[-1].priority == 0
    response = await harness.http.post(URL, json=chat(priority=5))
    assert response.status_code == 200
    assert harness.engine.requests[-1].priority == 5
    bad = await harness.http.post(URL, json=chat(priority="high"))
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "priority"
