"""Background responses over HTTP with the scripted engine and a real keys database (both
backends): queued, run on the deferred tier and stored; their events replayed and
followed; cancelled; cut by a reclaim and run again; billed once; kept apart per key;
ahead of batch lines; bad input answered in the Responses error shape."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage
from app.deferred.runner import DeferredRunner
from app.services.background import service as background_service
from app.storage.response_events import EventStore
from engine.scripted import ScriptedEngine
from tests.client import provided
from tests.unit.app.deferred.test_batches_http import (
    chat_line,
    create,
    runner_of,
    upload,
    validated,
)
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key

URL = "/v1/responses"
FINAL = ("completed", "incomplete", "failed", "cancelled")


def ask(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "input": "hi", "background": True, "max_output_tokens": 4, **extra}


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    """A Responses stream's events (`event:` names its data's `type`)."""
    assert response.status_code == 200, response.text
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            lines = dict(line.split(": ", 1) for line in block.split("\n"))
            event = json.loads(lines["data"])
            assert lines["event"] == event["type"]
            events.append(event)
    return events


async def queue(http: httpx.AsyncClient, secret: str, **extra: Any) -> dict[str, Any]:
    response = await http.post(URL, json=ask(**extra), headers=bearer(secret))
    assert response.status_code == 200, response.text
    return response.json()


async def retrieve(http: httpx.AsyncClient, secret: str, response_id: str) -> dict[str, Any]:
    response = await http.get(f"{URL}/{response_id}", headers=bearer(secret))
    assert response.status_code == 200, response.text
    return response.json()


async def until(
    runner: DeferredRunner, done: Callable[[], Awaitable[bool]], timeout_s: float = 30.0
) -> None:
    """Step the runner until `done`, bounded by time (a busy machine slows the tokens)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await runner.step()
        if await done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the response did not get there")


async def finished(http: httpx.AsyncClient, secret: str, response_id: str) -> dict[str, Any]:
    latest: dict[str, Any] = {}

    async def final() -> bool:
        latest.update(await retrieve(http, secret, response_id))
        counts = (await runner_of(http).store.counts([response_id]))[response_id]
        return latest["status"] in FINAL and counts.unfinished == 0

    await until(runner_of(http), final)
    return latest


async def usage_of(database: AsyncEngine, response_id: str) -> list[Any]:
    async with database.connect() as conn:
        statement = select(usage).where(usage.c.request_id == response_id)
        return list(await conn.execute(statement))


async def cut_runs_of(database: AsyncEngine, response_id: str) -> list[Any]:
    """The usage rows of the response's runs that did not answer it (cut, failed)."""
    async with database.connect() as conn:
        statement = select(usage).where(usage.c.request_id.startswith(f"{response_id}~"))
        return list(await conn.execute(statement))


async def test_queued_then_completed_stored_and_billed_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        queued = await queue(http, secret, metadata={"job": "one"})
        assert queued["status"] == "queued" and queued["background"] is True
        assert queued["output"] == [] and queued["usage"] is None
        assert (await retrieve(http, secret, queued["id"]))["status"] == "queued"
        done = await finished(http, secret, queued["id"])
        assert done["id"] == queued["id"] and done["created_at"] == queued["created_at"]
        assert done["status"] == "completed" and done["background"] is True
        assert done["metadata"] == {"job": "one"}
        assert done["output"][0]["content"][0]["text"] == "Hello, world!"
        assert done["usage"]["output_tokens"] == 4
        items = await http.get(f"{URL}/{queued['id']}/input_items", headers=bearer(secret))
        assert [item["type"] for item in items.json()["data"]] == ["message"]
        [row] = await usage_of(database, queued["id"])
        assert row.key_id == key_id and row.endpoint == URL and row.outcome == "completed"
        assert row.completion_tokens == 4 and row.prompt_tokens == done["usage"]["input_tokens"]
        assert row.batch_id is None


async def test_events_replay_and_starting_after(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        queued = await queue(http, secret)
        done = await finished(http, secret, queued["id"])
        replay = events_of(
            await http.get(f"{URL}/{queued['id']}?stream=true", headers=bearer(secret))
        )
        numbers = [event["sequence_number"] for event in replay]
        assert numbers == list(range(len(numbers)))
        assert replay[0]["type"] == "response.created"
        assert replay[-1]["type"] == "response.completed"
        assert replay[-1]["response"]["output"] == done["output"]
        # The same events a streamed request makes (ids and times aside).
        live = events_of(
            await http.post(
                URL, json=ask(background=False, stream=True, store=False), headers=bearer(secret)
            )
        )
        assert [event["type"] for event in live] == [event["type"] for event in replay]
        after = await http.get(
            f"{URL}/{queued['id']}?stream=true&starting_after=3", headers=bearer(secret)
        )
        assert events_of(after) == replay[4:]
        last = len(replay) - 1
        tail = await http.get(
            f"{URL}/{queued['id']}?stream=true&starting_after={last - 1}", headers=bearer(secret)
        )
        assert events_of(tail) == replay[-1:]


async def test_background_stream_true_streams_live_while_it_runs(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 30, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        runner = runner_of(http)
        streaming = asyncio.create_task(
            http.post(URL, json=ask(stream=True, max_output_tokens=30), headers=bearer(secret))
        )
        while not await runner.store.active("response", ("queued",)):
            await asyncio.sleep(0.01)
        [job] = await runner.store.active("response", ("queued",))
        follower = asyncio.create_task(
            http.get(f"{URL}/{job.id}?stream=true", headers=bearer(secret))
        )
        done = await finished(http, secret, job.id)
        created, followed = events_of(await streaming), events_of(await follower)
        assert created == followed
        assert created[-1]["type"] == "response.completed"
        assert created[-1]["response"]["output"] == done["output"]
        deltas = [e["delta"] for e in created if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == "x" * 30


async def test_cancel_before_it_runs_bills_nothing(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        queued = await queue(http, secret)
        cancel = await http.post(f"{URL}/{queued['id']}/cancel", headers=bearer(secret))
        assert cancel.status_code == 200, cancel.text
        assert cancel.json()["status"] == "cancelled" and cancel.json()["id"] == queued["id"]
        again = await http.post(f"{URL}/{queued['id']}/cancel", headers=bearer(secret))
        assert again.status_code == 200 and again.json()["status"] == "cancelled"
        runner = runner_of(http)
        for _ in range(5):
            await runner.step()
        assert (await retrieve(http, secret, queued["id"]))["status"] == "cancelled"
        assert await usage_of(database, queued["id"]) == []
        job = await runner.store.get(queued["id"])
        assert job is not None and job.state == "done"
        empty = await http.get(f"{URL}/{queued['id']}?stream=true", headers=bearer(secret))
        assert empty.status_code == 200 and empty.text == ""


async def test_cancel_while_running_aborts_and_bills_what_ran_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 400, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        runner = runner_of(http)
        queued = await queue(http, secret, max_output_tokens=400)

        async def some_events() -> bool:
            return await EventStore(provided(http.app, "tenant_data")).count(queued["id"]) > 8

        await until(runner, some_events)
        assert (await retrieve(http, secret, queued["id"]))["status"] == "in_progress"
        cancel = await http.post(f"{URL}/{queued['id']}/cancel", headers=bearer(secret))
        assert cancel.status_code == 200, cancel.text
        cancelled = cancel.json()
        assert cancelled["status"] == "cancelled"
        assert not engine.running  # the engine request was aborted
        text = cancelled["output"][0]["content"][0]["text"]
        assert 0 < len(text) < 400
        [row] = await usage_of(database, queued["id"])
        assert row.outcome == "cancelled" and row.completion_tokens >= len(text)
        assert row.completion_tokens < 400
        for _ in range(5):
            await runner.step()
        assert len(await usage_of(database, queued["id"])) == 1
        finished_cancel = await http.post(f"{URL}/{queued['id']}/cancel", headers=bearer(secret))
        assert finished_cancel.json()["status"] == "cancelled"


async def test_a_reclaim_cuts_it_back_to_queued_and_it_completes_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["y"] * 150, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        admission = provided(http.app, "admission")
        events = EventStore(provided(http.app, "tenant_data"))
        runner = runner_of(http)
        queued = await queue(http, secret, max_output_tokens=150)

        async def some_events() -> bool:
            return await events.count(queued["id"]) > 5

        await until(runner, some_events)
        follower = asyncio.create_task(
            http.get(f"{URL}/{queued['id']}?stream=true", headers=bearer(secret))
        )
        await asyncio.sleep(0.3)  # the follower has read some of the cut run's events
        await admission.drain()  # the owner takes the GPU back
        await runner.step()
        await runner.drain_lines()
        assert runner.stats.cut == 1 and not engine.running
        assert (await retrieve(http, secret, queued["id"]))["status"] == "queued"
        assert await events.count(queued["id"]) == 0  # the cut run's events are gone
        cut_stream = events_of(await follower)
        assert cut_stream[-1]["type"] == "error"
        assert cut_stream[-1]["code"] == "response_restarted"
        for _ in range(5):
            await runner.step()
        assert not runner.running
        await admission.resume()
        done = await finished(http, secret, queued["id"])
        assert done["status"] == "completed"
        assert done["output"][0]["content"][0]["text"] == "y" * 150
        replay = events_of(
            await http.get(f"{URL}/{queued['id']}?stream=true", headers=bearer(secret))
        )
        numbers = [event["sequence_number"] for event in replay]
        assert numbers == list(range(len(numbers)))  # one coherent run
        assert sum(event["type"] == "response.created" for event in replay) == 1
        [row] = await usage_of(database, queued["id"])
        assert row.completion_tokens == 150
        # The cut run is billed too: what the engine made before the owner came back.
        [cut] = await cut_runs_of(database, queued["id"])
        assert cut.outcome == "cut" and 5 < cut.completion_tokens < 150, cut
        assert cut.prompt_tokens == row.prompt_tokens


async def test_a_dead_replicas_run_is_answered_once(database: AsyncEngine, tmp_path: Path) -> None:
    """A replica that claimed the line and died: its lease runs out, another replica runs
    it; the dead one's late answer is refused, so the response is billed once."""
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        runner = runner_of(http)
        queued = await queue(http, secret)
        job = await runner.store.get(queued["id"])
        assert job is not None
        [dead] = await runner.store.claim(job.id, "dead-replica", 1, 60)
        late = await runner.handlers["response"].run(job, dead)
        clock = runner.store.clock
        runner.store.clock = lambda: clock() + 61
        done = await finished(http, secret, queued["id"])
        assert done["status"] == "completed"
        assert not await runner.store.answer(
            job.id, 0, "dead-replica", late.result, True, late.record
        )
        assert len(await usage_of(database, queued["id"])) == 1


async def test_another_key_cannot_see_stream_cancel_or_list_it(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret_a = await new_key(tenancy)
        _, secret_b = await new_key(tenancy)
        queued = await queue(http, secret_a)
        rid = queued["id"]
        for method, url in (
            ("GET", f"{URL}/{rid}"),
            ("GET", f"{URL}/{rid}?stream=true"),
            ("GET", f"{URL}/{rid}?stream=true&starting_after=0"),
            ("POST", f"{URL}/{rid}/cancel"),
            ("GET", f"{URL}/{rid}/input_items"),
            ("DELETE", f"{URL}/{rid}"),
        ):
            response = await http.request(method, url, headers=bearer(secret_b))
            assert response.status_code == 404, (method, url, response.text)
            assert response.json()["error"]["code"] == "response_not_found"
        done = await finished(http, secret_a, rid)
        assert done["status"] == "completed"


async def test_keys_share_the_capacity_and_responses_go_before_batch_lines(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 50, token_delay_s=0.02)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        runner = runner_of(http)
        runner.concurrency = 2
        key_a, secret_a = await new_key(tenancy)
        _, secret_b = await new_key(tenancy)
        # A batch waits first; then key A queues three responses, key B one.
        await create(http, secret_a, await upload(http, key_a, [chat_line("b0"), chat_line("b1")]))
        mine = [(await queue(http, secret_a, max_output_tokens=50))["id"] for _ in range(3)]
        theirs = (await queue(http, secret_b, max_output_tokens=50))["id"]
        await runner.step()
        running = {r.job.id: r.job.kind for r in runner.running.values()}
        assert set(running.values()) == {"response"}, running
        assert theirs in running and len(set(running) & set(mine)) == 1
        await runner.cut_all()


async def test_delete_of_a_running_response_stops_and_bills_it(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 400, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        runner = runner_of(http)
        events = EventStore(provided(http.app, "tenant_data"))
        queued = await queue(http, secret, max_output_tokens=400)

        async def some_events() -> bool:
            return await events.count(queued["id"]) > 4

        await until(runner, some_events)
        deleted = await http.delete(f"{URL}/{queued['id']}", headers=bearer(secret))
        assert deleted.status_code == 200, deleted.text
        assert not engine.running
        [row] = await usage_of(database, queued["id"])
        assert row.outcome == "cancelled" and 0 < row.completion_tokens < 400
        assert await events.count(queued["id"]) == 0
        assert await runner.store.get(queued["id"]) is None
        gone = await http.get(f"{URL}/{queued['id']}?stream=true", headers=bearer(secret))
        assert gone.status_code == 404


async def test_bad_input_is_a_400_in_the_responses_shape(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        plain = await http.post(
            URL, json=ask(background=False, max_output_tokens=2), headers=bearer(secret)
        )
        assert plain.status_code == 200
        queued = await queue(http, secret)
        rid = queued["id"]
        cases = [
            ("POST", URL, ask(store=False), "background"),
            ("POST", URL, ask(background="yes"), "background"),
            ("GET", f"{URL}/{rid}?stream=maybe", None, "stream"),
            ("GET", f"{URL}/{rid}?stream=true&starting_after=-1", None, "starting_after"),
            ("GET", f"{URL}/{rid}?stream=true&starting_after=abc", None, "starting_after"),
            ("GET", f"{URL}/{rid}?stream=true&starting_after=1.5", None, "starting_after"),
            ("GET", f"{URL}/{rid}?stream=true&starting_after=" + "9" * 40, None, "starting_after"),
            ("POST", f"{URL}/{plain.json()['id']}/cancel", None, "response_id"),
            ("GET", f"{URL}/{plain.json()['id']}?stream=true", None, "stream"),
        ]
        for method, url, payload, param in cases:
            response = await http.request(method, url, json=payload, headers=bearer(secret))
            assert response.status_code == 400, (url, payload, response.text)
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == param, error
        await finished(http, secret, rid)
        count = len(events_of(await http.get(f"{URL}/{rid}?stream=true", headers=bearer(secret))))
        last = await http.get(
            f"{URL}/{rid}?stream=true&starting_after={count - 1}", headers=bearer(secret)
        )
        assert last.status_code == 200 and last.text == ""  # nothing after the last event
        for after in (count, 10**9):
            response = await http.get(
                f"{URL}/{rid}?stream=true&starting_after={after}", headers=bearer(secret)
            )
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == "starting_after"
        done = await http.post(f"{URL}/{rid}/cancel", headers=bearer(secret))
        assert (
            done.status_code == 400 and done.json()["error"]["code"] == "response_not_cancellable"
        )
        unknown = await http.post(f"{URL}/resp_nope/cancel", headers=bearer(secret))
        assert unknown.status_code == 404
        not_allowed = await http.post(URL, json=ask(model="other"), headers=bearer(secret))
        assert not_allowed.status_code == 404


async def test_events_are_written_in_batches_within_the_byte_bound(
    database: AsyncEngine, tmp_path: Path
) -> None:
    from tests.unit.app.storage.test_responses import statements

    engine = ScriptedEngine(tokens=["z"] * 300)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        queued = await queue(http, secret, max_output_tokens=300)
        with statements(database) as seen:
            done = await finished(http, secret, queued["id"])
        assert done["status"] == "completed"
        count = await EventStore(provided(http.app, "tenant_data")).count(queued["id"])
        inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT INTO RESPONSE_EVENTS")]
        assert count > 300 and 1 <= len(inserts) <= count // 50

        store = provided(http.app, "response_store")
        store.limits = dataclasses.replace(store.limits, max_stored_bytes=8_000)
        big = await queue(http, secret, max_output_tokens=300)
        failed = await finished(http, secret, big["id"])
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "stored_response_too_large"
        replay = events_of(await http.get(f"{URL}/{big['id']}?stream=true", headers=bearer(secret)))
        assert [e["type"] for e in replay[-2:]] == ["error", "response.failed"]
        assert sum(len(json.dumps(e)) for e in replay[:-2]) <= 8_000
        assert not engine.running


async def test_an_interactive_request_cuts_a_batch_line_before_a_background_response(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 200, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        runner = runner_of(http)
        key_id, secret = await new_key(tenancy)
        queued = await queue(http, secret, max_output_tokens=200)
        await runner.step()  # the response starts first
        admission = provided(http.app, "admission")
        while admission.deferred_running() < 1:
            await asyncio.sleep(0.01)
        await create(http, secret, await upload(http, key_id, [chat_line("b", max_tokens=200)]))
        await validated(runner)
        runner.wake()
        await runner.step()
        kinds = sorted(r.job.kind for r in runner.running.values())
        assert kinds == ["batch", "response"], kinds
        runner.make_room()  # the batch line started last, but it goes first
        await asyncio.sleep(0.05)
        assert [r.job.kind for r in runner.running.values()] == ["response"]
        done = await finished(http, secret, queued["id"])
        assert done["status"] == "completed"
        await runner.cut_all()


async def test_a_cancel_of_a_response_a_dead_replica_ran_ends_it(
    database: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background_service, "CANCEL_WAIT_S", 0.2)
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        runner = runner_of(http)
        queued = await queue(http, secret)
        await runner.store.claim(queued["id"], "dead-replica", 1, 60)  # and never answers
        cancel = await http.post(f"{URL}/{queued['id']}/cancel", headers=bearer(secret))
        assert cancel.status_code == 200  # answered as it is: that replica may be alive
        clock = runner.store.clock
        runner.store.clock = lambda: clock() + 61  # it was not: its lease ran out
        done = await finished(http, secret, queued["id"])
        assert done["status"] == "cancelled" and done["output"] == []
        assert await usage_of(database, queued["id"]) == []


async def test_queueing_takes_one_of_the_keys_requests(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=1)
        await queue(http, secret)
        refused = await http.post(URL, json=ask(), headers=bearer(secret))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert "retry-after" in refused.headers


async def test_a_background_responses_engine_request_carries_its_keys_weight(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy, weight=0.5)
        queued = await queue(http, secret)
        assert (await finished(http, secret, queued["id"]))["status"] == "completed"
    assert [request.weight for request in engine.requests] == [0.5]
