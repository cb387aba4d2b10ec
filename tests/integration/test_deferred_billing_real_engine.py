"""Reconciliation of deferred work: through the app over the real engine and a real
database (a SQLite file, then the real PostgreSQL server), one key's background
responses (one run to its end, one cut by an interactive request and run again, one
cancelled and one deleted while running) and a batch whose running lines are cut and
run again; then the key's usage rows add up to what vLLM itself counted, token for
token, every run's work billed once (how vLLM counts: tests/integration/
test_billing_real_engine.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import open_database
from app.db.schema import usage
from app.deferred.runner import DeferredRunner
from app.storage.response_events import EventStore
from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.vllm_backend.engine import VLLMEngine
from tests.client import provided
from tests.integration.test_billing_real_engine import engine_counts, settle
from tests.postgres import TempPostgres
from tests.unit.app.deferred.test_batches_http import CHAT, create, runner_of, upload
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key

URL = "/v1/responses"
FINAL = ("completed", "incomplete", "failed", "cancelled")
TOKENS = 48  # each background response's and batch line's output, to its end


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/lilac.db"
    else:
        pg: TempPostgres = request.getfixturevalue("pg_server")
        url = await pg.new_database("deferred_billing")
    engine = await open_database(url)
    yield engine
    await engine.dispose()


async def eventually(
    runner: DeferredRunner, check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 120
) -> None:
    """Tick the runner (as its own loop does in a server) until `check`."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, what
        await runner.step()
        await asyncio.sleep(0.05)


async def background(http: httpx.AsyncClient, secret: str, topic: str) -> str:
    body = {
        "model": DEFAULT_MODEL_NAME,
        "input": f"Write a long story about {topic}.",
        "background": True,
        "max_output_tokens": TOKENS,
        "temperature": 0,
    }
    response = await http.post(URL, json=body, headers=bearer(secret))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def status(http: httpx.AsyncClient, secret: str, response_id: str) -> str:
    response = await http.get(f"{URL}/{response_id}", headers=bearer(secret))
    if response.status_code == 404:
        return "deleted"
    assert response.status_code == 200, response.text
    return str(response.json()["status"])


async def interactive(http: httpx.AsyncClient, secret: str) -> None:
    """A short chat of the same key: admitted, it cuts every deferred line running."""
    body = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 2,
    }
    response = await http.post(CHAT, json=body, headers=bearer(secret))
    assert response.status_code == 200, response.text


async def test_deferred_usage_adds_up_to_the_engine_counts(
    real_engine: VLLMEngine, database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl", real_engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        runner = runner_of(http)
        events = EventStore(provided(http.app, "tenant_data"))
        await settle(real_engine)
        prompt_before, output_before = engine_counts()

        async def streaming(response_id: str) -> bool:  # its run has written output
            return await events.count(response_id) > 4

        # Cut part-way by an interactive request, then run again to its end.
        cut = await background(http, secret, "a lighthouse")
        await eventually(runner, lambda: streaming(cut), "the response never ran")
        await interactive(http, secret)
        # Cancelled, then deleted, while running.
        cancelled = await background(http, secret, "a harbour")
        await eventually(runner, lambda: streaming(cancelled), "the second response never ran")
        answer = await http.post(f"{URL}/{cancelled}/cancel", headers=bearer(secret))
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled", answer.text
        deleted = await background(http, secret, "a storm")
        await eventually(runner, lambda: streaming(deleted), "the third response never ran")
        gone = await http.delete(f"{URL}/{deleted}", headers=bearer(secret))
        assert gone.status_code == 200, gone.text

        # A batch: its running lines cut part-way by an interactive request, run again.
        lines = [
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": CHAT,
                "body": {
                    "model": DEFAULT_MODEL_NAME,
                    "messages": [{"role": "user", "content": f"Count to {i + 40}."}],
                    "max_tokens": TOKENS,
                    "ignore_eos": True,
                },
            }
            for i in range(6)
        ]
        batch = await create(http, secret, await upload(http, key_id, lines))

        async def lines_generating() -> bool:
            running = list(runner.running.values())
            return len(running) >= 2 and runner.capacity.deferred_prefilling() == 0

        await eventually(runner, lines_generating, "the batch's lines never ran")
        await asyncio.sleep(0.3)  # some tokens each
        await interactive(http, secret)

        async def all_final() -> bool:
            states = [await status(http, secret, rid) for rid in (cut, cancelled, deleted)]
            answer = await http.get(f"/v1/batches/{batch['id']}", headers=bearer(secret))
            return all(s in (*FINAL, "deleted") for s in states) and answer.json()["status"] in (
                "completed",
                "failed",
            )

        await eventually(runner, all_final, "the deferred work did not end", timeout_s=300)
        assert await status(http, secret, cut) in ("completed", "incomplete")  # ran to its end
        await settle(real_engine)
        prompt_after, output_after = engine_counts()

    async with database.connect() as conn:
        rows = (await conn.execute(select(usage).where(usage.c.key_id == key_id))).all()
    outcomes = {(r.request_id.split("~")[0], r.outcome) for r in rows}
    assert (cut, "cut") in outcomes and (cut, "completed") in outcomes, outcomes
    assert (cancelled, "cancelled") in outcomes and (deleted, "cancelled") in outcomes
    batch_runs = [r for r in rows if r.batch_id == batch["id"]]
    assert sum(r.outcome == "completed" and "~" not in r.request_id for r in batch_runs) == 6
    assert any(r.outcome == "cut" for r in batch_runs), [(r.request_id, r.outcome) for r in rows]
    assert len({r.request_id for r in rows}) == len(rows)

    # Token for token: every output token the engine made, and the prompt of every run
    # that produced output (a run cut before its first token paid its prompt, which vLLM
    # does not count).
    assert sum(r.completion_tokens for r in rows) == output_after - output_before
    counted_prompts = sum(r.prompt_tokens for r in rows if r.ttft_ms is not None)
    assert counted_prompts == prompt_after - prompt_before
