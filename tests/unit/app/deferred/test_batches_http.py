"""Batches over HTTP with the scripted engine and a real keys database (both backends):
lines answered as their endpoint answers, metered per batch, cancelled, expired, kept
apart per key, replayed exactly once, shared fairly, and never in an interactive
request's way."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage
from app.deferred.runner import DeferredRunner
from app.services.batches.jobs import KIND
from app.storage.files import FileStore
from app.tenancy.report import summarize
from engine.scripted import ScriptedEngine
from tests.client import provided
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, keyed_app, new_key

CHAT = "/v1/chat/completions"


def chat_line(custom_id: str, **body: Any) -> dict[str, Any]:
    request = {"model": "scripted", "messages": [{"role": "user", "content": custom_id}]}
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {**request, "max_tokens": 4, **body},
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def runner_of(http: httpx.AsyncClient) -> DeferredRunner:
    runner: DeferredRunner = provided(http.app, "batch_runner")
    runner.jobs_every_s = 0.0
    return runner


def files_of(http: httpx.AsyncClient) -> FileStore:
    return FileStore(provided(http.app, "tenant_data"))


async def upload(http: httpx.AsyncClient, key_id: str, lines: list[dict[str, Any]]) -> str:
    file = await files_of(http).create(key_id, "batch", "in.jsonl", jsonl(lines))
    return file.id


async def create(http: httpx.AsyncClient, secret: str, file_id: str) -> dict[str, Any]:
    response = await http.post(
        "/v1/batches",
        json={"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"},
        headers=bearer(secret),
    )
    assert response.status_code == 200, response.text
    return response.json()


async def until(
    runner: DeferredRunner, done: Callable[[], Awaitable[bool]], timeout_s: float = 30.0
) -> None:
    """Step the runner until `done`: bounded by time, not steps, since a busy machine
    slows the scripted engine's tokens (a batch of long lines takes seconds)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await runner.step()
        if await done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the batch did not get there")


async def validated(runner: DeferredRunner) -> None:
    """Ticks that validate the batches created, starting none of their lines: until none
    is left validating (a tick waits only so long for a validation, and a busy machine
    can take longer)."""
    concurrency, runner.concurrency = runner.concurrency, 0
    try:
        await until(runner, lambda: _none_validating(runner))
    finally:
        runner.concurrency = concurrency


async def _none_validating(runner: DeferredRunner) -> bool:
    return not await runner.store.active(KIND, ("validating",))


async def status_of(http: httpx.AsyncClient, secret: str, batch_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/batches/{batch_id}", headers=bearer(secret))
    assert response.status_code == 200, response.text
    return response.json()


async def finished(http: httpx.AsyncClient, secret: str, batch: dict[str, Any]) -> dict[str, Any]:
    runner = runner_of(http)
    latest: dict[str, Any] = {}

    async def final() -> bool:
        latest.update(await status_of(http, secret, batch["id"]))
        return latest["status"] in ("completed", "failed", "expired", "cancelled")

    await until(runner, final)
    return latest


async def file_lines(http: httpx.AsyncClient, owner: str, file_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in files_of(http).lines(owner, file_id)]


async def test_a_batch_answers_each_line_as_its_endpoint_would(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        lines = [chat_line(f"req-{i}") for i in range(4)]
        lines.append(chat_line("bad", max_tokens=0))  # the endpoint answers 400
        batch = await create(http, secret, await upload(http, key_id, lines))
        assert batch["status"] == "validating" and batch["request_counts"]["total"] == 0
        await runner_of(http).step()  # the runner validates the file: the lines are written
        validated = await status_of(http, secret, batch["id"])
        assert validated["status"] == "in_progress" and validated["in_progress_at"]
        assert validated["request_counts"]["total"] == 5
        done = await finished(http, secret, batch)
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 5, "completed": 4, "failed": 1}
        assert done["completed_at"] and done["finalizing_at"]

        direct = await http.post(CHAT, json=lines[0]["body"], headers=bearer(secret))
        out = await file_lines(http, key_id, done["output_file_id"])
        assert sorted(line["custom_id"] for line in out) == [f"req-{i}" for i in range(4)]
        for line in out:
            assert line["error"] is None and line["response"]["status_code"] == 200
            body = line["response"]["body"]
            assert body["id"] == line["response"]["request_id"]
            assert body["choices"] == direct.json()["choices"]
            assert body["usage"] == direct.json()["usage"]
        assert len({line["id"] for line in out}) == 4

        bad_direct = await http.post(CHAT, json=lines[4]["body"], headers=bearer(secret))
        [error] = await file_lines(http, key_id, done["error_file_id"])
        assert error["custom_id"] == "bad"
        assert error["response"]["status_code"] == bad_direct.status_code == 400
        assert error["response"]["body"] == bad_direct.json()

        async with database.connect() as conn:
            rows = (await conn.execute(select(usage).where(usage.c.batch_id == batch["id"]))).all()
        assert len(rows) == 4 and {row.key_id for row in rows} == {key_id}
        assert all(row.completion_tokens > 0 and row.endpoint == CHAT for row in rows)
        report = {row["batch"]: row for row in await summarize(database, "batch")}
        assert report[batch["id"]]["requests"] == 4
        # The direct request is interactive work (the refused one is no row).
        assert report[None]["requests"] == 1


async def test_another_key_sees_nothing_of_a_batch(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_a, secret_a = await new_key(tenancy)
        _, secret_b = await new_key(tenancy)
        file_id = await upload(http, key_a, [chat_line("a")])
        batch = await create(http, secret_a, file_id)
        for method, url in (
            ("GET", f"/v1/batches/{batch['id']}"),
            ("POST", f"/v1/batches/{batch['id']}/cancel"),
        ):
            response = await http.request(method, url, headers=bearer(secret_b))
            assert response.status_code == 404, response.text
            assert response.json()["error"]["type"] == "invalid_request_error"
        stolen = await http.post(
            "/v1/batches",
            json={"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"},
            headers=bearer(secret_b),
        )
        assert stolen.status_code == 404, stolen.text
        listing = await http.get("/v1/batches", headers=bearer(secret_b))
        assert listing.json()["data"] == []
        mine = await http.get("/v1/batches", headers=bearer(secret_a))
        assert [b["id"] for b in mine.json()["data"]] == [batch["id"]]


async def test_bad_requests_are_clear_errors(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy, models=["other"])
        file_id = await upload(http, key_id, [chat_line("a")])
        cases = [
            (
                {
                    "input_file_id": file_id,
                    "endpoint": "/v1/embeddings",
                    "completion_window": "24h",
                },
                "endpoint",
            ),
            (
                {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "1h"},
                "completion_window",
            ),
            ({"endpoint": CHAT, "completion_window": "24h"}, "input_file_id"),
        ]
        for body, param in cases:
            response = await http.post("/v1/batches", json=body, headers=bearer(secret))
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == param
        for query in ("limit=0", "limit=101", "limit=x"):
            response = await http.get(f"/v1/batches?{query}", headers=bearer(secret))
            assert response.status_code == 400 and response.json()["error"]["param"] == "limit"
        # The key may not use the line's model: validation fails the batch, saying which
        # line, in OpenAI's `errors` object.
        failed = await finished(http, secret, await create(http, secret, file_id))
        assert failed["status"] == "failed" and failed["failed_at"]
        assert failed["errors"]["object"] == "list"
        [error] = failed["errors"]["data"]
        assert error["code"] == "model_not_found" and error["line"] == 1
        assert error["param"] == "body.model"
        assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        dup = await upload(http, key_id, [chat_line("x", model="other")] * 2)
        failed = await finished(http, secret, await create(http, secret, dup))
        [error] = failed["errors"]["data"]
        assert error["code"] == "duplicate_custom_id" and error["line"] == 2


async def test_cancel_ends_the_lines_not_run(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        file_id = await upload(http, key_id, [chat_line("a"), chat_line("b")])
        # Cancelled while validating: no line was written, none is reported.
        early = await create(http, secret, file_id)
        response = await http.post(f"/v1/batches/{early['id']}/cancel", headers=bearer(secret))
        assert response.status_code == 200 and response.json()["status"] == "cancelling"
        done = await finished(http, secret, early)
        assert done["status"] == "cancelled" and done["request_counts"]["total"] == 0
        assert done["output_file_id"] is None and done["error_file_id"] is None

        batch = await create(http, secret, file_id)
        runner = runner_of(http)
        runner.concurrency = 0  # validated, but no line starts
        await runner.step()
        assert (await status_of(http, secret, batch["id"]))["status"] == "in_progress"
        response = await http.post(f"/v1/batches/{batch['id']}/cancel", headers=bearer(secret))
        assert response.status_code == 200 and response.json()["status"] == "cancelling"
        done = await finished(http, secret, batch)
        assert done["status"] == "cancelled" and done["cancelled_at"]
        assert done["output_file_id"] is None
        errors = await file_lines(http, key_id, done["error_file_id"])
        assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
            ("a", "batch_cancelled"),
            ("b", "batch_cancelled"),
        ]
        again = await http.post(f"/v1/batches/{batch['id']}/cancel", headers=bearer(secret))
        assert again.status_code == 200 and again.json()["status"] == "cancelled"


async def test_expiry_keeps_what_completed(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        runner = runner_of(http)
        batch = await create(
            http, secret, await upload(http, key_id, [chat_line(f"r{i}") for i in range(3)])
        )
        await validated(runner)
        # One line runs and is answered; then the window ends with two not run.
        [line] = await runner.store.claim(batch["id"], runner.replica, 1, 60)
        job = await runner.store.get(batch["id"])
        assert job is not None
        answer = await runner.handlers["batch"].run(job, line)
        assert await runner.store.answer(
            job.id, line.seq, runner.replica, answer.result, True, answer.record
        )
        runner.store.clock = lambda: time.time() + 86_401
        done = await finished(http, secret, batch)
        assert done["status"] == "expired" and done["expired_at"]
        assert done["request_counts"] == {"total": 3, "completed": 1, "failed": 2}
        [out] = await file_lines(http, key_id, done["output_file_id"])
        assert out["custom_id"] == "r0"
        errors = await file_lines(http, key_id, done["error_file_id"])
        assert [(e["custom_id"], e["error"]["code"], e["response"]) for e in errors] == [
            ("r1", "batch_expired", None),
            ("r2", "batch_expired", None),
        ]


async def test_a_dead_replicas_lines_are_answered_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Lines a replica claimed and never answered (killed) run again once its lease is
    over; its late answer is refused: every line answered once, billed once."""
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        runner = runner_of(http)
        batch = await create(
            http, secret, await upload(http, key_id, [chat_line(f"r{i}") for i in range(4)])
        )
        await validated(runner)
        job = await runner.store.get(batch["id"])
        assert job is not None
        dead = await runner.store.claim(batch["id"], "dead-replica", 2, 60)
        late = await runner.handlers["batch"].run(job, dead[0])
        await until(runner, lambda: _counts_are(runner, batch["id"], {"answered": 2, "running": 2}))
        runner.store.clock = lambda: time.time() + 61  # the dead replica's leases ran out
        done = await finished(http, secret, batch)
        assert not await runner.store.answer(
            job.id, 0, "dead-replica", late.result, True, late.record
        )
        assert done["status"] == "completed" and done["request_counts"]["completed"] == 4
        out = await file_lines(http, key_id, done["output_file_id"])
        assert sorted(line["custom_id"] for line in out) == ["r0", "r1", "r2", "r3"]
        async with database.connect() as conn:
            rows = (
                await conn.execute(
                    select(usage.c.request_id).where(usage.c.batch_id == batch["id"])
                )
            ).all()
        assert len(rows) == len({row[0] for row in rows}) == 4


async def _counts_are(runner: DeferredRunner, batch_id: str, expected: dict[str, int]) -> bool:
    return (await runner.store.counts([batch_id]))[batch_id].by_state == expected


async def test_keys_share_spare_capacity_fairly(database: AsyncEngine, tmp_path: Path) -> None:
    engine = ScriptedEngine(tokens=["x"] * 50, token_delay_s=0.02)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        runner = runner_of(http)
        runner.concurrency = 2
        batches = []
        for _ in range(2):
            key_id, secret = await new_key(tenancy)
            lines = [chat_line(f"r{i}", max_tokens=50) for i in range(3)]
            batches.append(await create(http, secret, await upload(http, key_id, lines)))
        await validated(runner)  # both keys' lines are waiting before the slots are given
        # Key one made two batches first: still, the two slots go one to each key.
        extra_key = batches[0]
        await runner.step()
        owners = sorted(running.job.owner for running in runner.running.values())
        assert len(owners) == 2 and owners[0] != owners[1], owners
        assert extra_key["id"] in {running.job.id for running in runner.running.values()}
        await runner.cut_all()


async def test_an_interactive_request_never_waits_for_batch_lines(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """With every slot taken by batch lines, an interactive request is admitted as soon
    as the newest line is cut; the cut line runs again later and the batch completes."""
    engine = ScriptedEngine(tokens=["x"] * 200, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        admission = provided(http.app, "admission")
        admission.policy = dataclasses.replace(admission.policy, max_concurrent=1)
        key_id, secret = await new_key(tenancy)
        _, other = await new_key(tenancy)
        runner = runner_of(http)
        batch = await create(
            http,
            secret,
            await upload(
                http, key_id, [chat_line("a", max_tokens=200), chat_line("b", max_tokens=200)]
            ),
        )
        await runner.step()
        while admission.deferred_running() < 1:
            await asyncio.sleep(0.01)
        assert len(runner.running) == 1 and admission.deferred_room() == 0
        started = time.monotonic()
        response = await http.post(
            CHAT,
            json={
                "model": "scripted",
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers=bearer(other),
        )
        assert response.status_code == 200, response.text
        assert runner.stats.cut == 1
        assert time.monotonic() - started < 1.0  # not the 2 s the line had left
        done = await finished(http, secret, batch)
        assert done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}


async def test_a_reclaim_pauses_the_batch_and_lending_resumes_it(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 100, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        admission = provided(http.app, "admission")
        key_id, secret = await new_key(tenancy)
        runner = runner_of(http)
        batch = await create(
            http,
            secret,
            await upload(http, key_id, [chat_line(f"r{i}", max_tokens=100) for i in range(3)]),
        )
        await runner.step()
        assert len(runner.running) == 3
        await admission.drain()  # the owner takes the GPU back
        await runner.step()
        await runner.drain_lines()
        assert runner.stats.cut == 3 and not runner.running
        for _ in range(5):
            await runner.step()
        assert not runner.running  # nothing starts while drained
        assert await _counts_are(runner, batch["id"], {"pending": 3})
        await admission.resume()
        done = await finished(http, secret, batch)
        assert done["status"] == "completed" and done["request_counts"]["failed"] == 0


async def test_operators_see_every_batch_and_the_metrics(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_a, secret_a = await new_key(tenancy)
        key_b, secret_b = await new_key(tenancy)
        first = await create(http, secret_a, await upload(http, key_a, [chat_line("a")]))
        second = await create(http, secret_b, await upload(http, key_b, [chat_line("b")]))
        await finished(http, secret_a, first)
        await finished(http, secret_b, second)
        assert (await http.get("/admin/batches")).status_code == 401
        listing = await http.get("/admin/batches", headers=bearer(ADMIN_KEY))
        assert listing.status_code == 200, listing.text
        owners = {item["id"]: item["owner"] for item in listing.json()["data"]}
        assert owners == {first["id"]: key_a, second["id"]: key_b}
        assert listing.json()["runner"]["answered"] == 2
        narrowed = await http.get("/admin/batches?status=in_progress", headers=bearer(ADMIN_KEY))
        assert narrowed.json()["data"] == []
        bad = await http.get("/admin/batches?status=nope", headers=bearer(ADMIN_KEY))
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "status"
        text = (await http.get("/metrics")).text
        assert "lilac_batch_lines_completed_total 2.0" in text
        assert 'lilac_batch_lines{state="running"} 0.0' in text
        completion = [
            line
            for line in text.splitlines()
            if line.startswith('lilac_batch_tokens_total{kind="completion"}')
        ]
        assert completion and float(completion[0].split()[-1]) > 0


async def test_an_arriving_interactive_request_cuts_lines_over_the_limit(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Through the real admission controller: the request's arrival cuts the newest
    lines over `beside_interactive` before it reaches the engine; no line starts while
    it runs, and once the hysteresis is over lines fill the concurrency again."""
    engine = ScriptedEngine(tokens=["x"] * 100, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        admission = provided(http.app, "admission")
        key_id, secret = await new_key(tenancy)
        runner = runner_of(http)
        runner.beside_interactive = 1
        lines = [chat_line(f"r{i}", max_tokens=100) for i in range(8)]
        batch = await create(http, secret, await upload(http, key_id, lines))
        await until(runner, lambda: _running_at_least(runner, 3))
        body = {
            "model": "scripted",
            "max_tokens": 60,
            "messages": [{"role": "user", "content": "hi"}],
        }
        interactive = asyncio.create_task(http.post(CHAT, json=body, headers=bearer(secret)))
        while admission.interactive_running() < 1:
            await asyncio.sleep(0.01)
        live = [r for r in runner.running.values() if not r.task.cancelling()]
        assert len(live) == 1
        for _ in range(5):
            await runner.step()
            assert sum(not r.task.cancelling() for r in runner.running.values()) <= 1
        assert (await interactive).status_code == 200
        assert runner.stats.cut >= 2
        runner.resume_after_s = 0.0  # the hysteresis: tests/unit/app/deferred/test_runner_policy
        await runner.step()
        assert len(runner.running) > 1  # alone again: up to the concurrency flag
        done = await finished(http, secret, batch)
        assert done["request_counts"] == {"total": 8, "completed": 8, "failed": 0}
        # Every line billed its answer; each run cut part-way billed what it had made.
        async with database.connect() as conn:
            statement = select(usage.c.request_id, usage.c.outcome, usage.c.completion_tokens)
            rows = (await conn.execute(statement.where(usage.c.batch_id == batch["id"]))).all()
        answers = [r for r in rows if "~" not in r.request_id]
        cuts = [r for r in rows if "~" in r.request_id]
        assert [(r.outcome, r.completion_tokens) for r in answers] == [("completed", 100)] * 8
        assert 1 <= len(cuts) <= runner.stats.cut, rows
        assert all(r.outcome == "cut" and 0 <= r.completion_tokens < 100 for r in cuts), cuts


async def _running_at_least(runner: DeferredRunner, count: int) -> bool:
    return len(runner.running) >= count


async def test_a_batch_lines_engine_requests_carry_its_keys_weight(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy, weight=2.5)
        lines = [chat_line("a"), chat_line("b")]
        done = await finished(
            http, secret, await create(http, secret, await upload(http, key_id, lines))
        )
        assert done["request_counts"]["completed"] == 2, done
    assert [request.weight for request in engine.requests] == [2.5, 2.5]


async def test_another_keys_batch_id_as_a_cursor_reads_as_unknown(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """The list's `after` is looked up among the caller's own batches: another key's id
    pages exactly as an id that does not exist (it tells nothing of the other's batch)."""
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_a, secret_a = await new_key(tenancy)
        key_b, secret_b = await new_key(tenancy)
        theirs = await create(http, secret_a, await upload(http, key_a, [chat_line("a")]))
        mine = [
            (await create(http, secret_b, await upload(http, key_b, [chat_line(f"b{i}")])))["id"]
            for i in range(2)
        ]

        async def page(after: str) -> list[str]:
            answer = await http.get(
                "/v1/batches", params={"after": after}, headers=bearer(secret_b)
            )
            assert answer.status_code == 200, answer.text
            return [batch["id"] for batch in answer.json()["data"]]

        assert await page(theirs["id"]) == await page("batch_doesnotexist")
        assert await page(mine[1]) == [mine[0]]  # its own ids page as before
