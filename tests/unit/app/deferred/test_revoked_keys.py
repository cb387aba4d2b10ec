"""A revoked key's batches and background responses stop at once. Its batch, on every
replica: two replicas (two apps, each its engine and runner at the default ticks) over
one database run a batch; the key is revoked through the admin API of one, and within
2 s no line of it runs on either, every line not answered is `cancelled`, and the batch
ends `cancelled`, reporting them."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.responses import stored_responses
from app.db.schema import usage
from app.deferred.runner import DeferredRunner
from engine.scripted import ScriptedEngine
from tests.client import provided
from tests.unit.app.deferred.test_batches_http import chat_line, create, file_lines, upload
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, keyed_app, new_key

LINES = 120
TOKENS = 40


def replica(http: httpx.AsyncClient, name: str) -> DeferredRunner:
    runner: DeferredRunner = provided(http.app, "batch_runner")
    runner.replica = name
    runner.handlers["batch"].replica = name  # type: ignore[attr-defined]
    runner.concurrency = 4
    return runner


async def admin_batch(http: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    listing = await http.get("/admin/batches", headers=bearer(ADMIN_KEY))
    assert listing.status_code == 200, listing.text
    [batch] = [item for item in listing.json()["data"] if item["id"] == batch_id]
    return batch


async def billed(database: AsyncEngine, batch_id: str) -> dict[str, int]:
    """The batch's usage rows: `answered` (a line's answer), and by outcome those of
    runs that did not answer their line (their ids are the run's, `~` and a count)."""
    async with database.connect() as conn:
        statement = select(usage.c.request_id, usage.c.outcome).where(usage.c.batch_id == batch_id)
        rows = (await conn.execute(statement)).all()
    return dict(Counter("answered" if "~" not in rid else outcome for rid, outcome in rows))


async def stopped(runners: list[DeferredRunner], batch_id: str) -> bool:
    counts = (await runners[0].store.counts([batch_id]))[batch_id]
    return counts.unfinished == 0 and not any(runner.running for runner in runners)


async def test_a_revoked_keys_batch_stops_on_every_replica(
    database: AsyncEngine, tmp_path: Path
) -> None:
    tokens = ["x"] * TOKENS
    async with (
        keyed_app(database, tmp_path / "one.jsonl", ScriptedEngine(tokens, token_delay_s=0.01))
        as (one, tenancy),
        keyed_app(database, tmp_path / "two.jsonl", ScriptedEngine(tokens, token_delay_s=0.01))
        as (two, _),
    ):  # fmt: skip
        key_id, secret = await new_key(tenancy)
        lines = [chat_line(f"r{i}", max_tokens=TOKENS) for i in range(LINES)]
        batch = await create(one, secret, await upload(one, key_id, lines))
        runners = [replica(one, "replica-one"), replica(two, "replica-two")]
        for runner in runners:
            runner.start()
        try:
            # Both replicas run lines of the batch, and some are answered.
            deadline = time.monotonic() + 30
            while not all(r.running for r in runners) or not any(r.stats.answered for r in runners):
                assert time.monotonic() < deadline, "the batch never ran on both replicas"
                await asyncio.sleep(0.02)
            revoked_at = time.monotonic()
            response = await one.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN_KEY))
            assert response.status_code == 200, response.text
            while not await stopped(runners, batch["id"]):
                assert time.monotonic() - revoked_at < 2.0, "the batch still runs"
                await asyncio.sleep(0.02)
            stop_s = time.monotonic() - revoked_at
            print(
                f"\n{database.dialect.name}: the batch stopped {stop_s:.2f} s after the revocation"
            )
            answered = (await runners[0].store.counts([batch["id"]]))[batch["id"]].ok
            rows = await billed(database, batch["id"])
            await asyncio.sleep(0.5)  # nothing more runs, or is billed, afterwards
            assert not any(runner.running for runner in runners)
            counts = (await runners[0].store.counts([batch["id"]]))[batch["id"]]
            assert await billed(database, batch["id"]) == rows
        finally:
            for runner in runners:
                await runner.close()
        assert counts.by_state == {"answered": answered, "cancelled": LINES - answered}
        assert 0 < answered < LINES
        # The answered lines; and the runs going on at the revocation (at most four a
        # replica), stopped part-way or refused their answer, billed what the engine did.
        assert rows.pop("answered") == answered
        assert set(rows) <= {"completed", "cut"} and sum(rows.values()) <= 8, rows
        done = await admin_batch(two, batch["id"])  # read on the other replica
        assert done["status"] == "cancelled" and done["cancelled_at"], done
        assert done["request_counts"] == {
            "total": LINES,
            "completed": answered,
            "failed": LINES - answered,
        }
        errors = await file_lines(one, key_id, done["error_file_id"])
        assert len(errors) == LINES - answered
        assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
        out = await file_lines(one, key_id, done["output_file_id"])
        assert len(out) == answered


async def test_a_revoked_keys_background_responses_end_at_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """One running, one queued behind it: within 2 s of the revocation both are
    `cancelled`, the running one's engine request aborted and what it ran billed once,
    the queued one billed nothing."""
    engine = ScriptedEngine(["x"] * 400, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=None)
        runner: DeferredRunner = provided(http.app, "batch_runner")
        runner.concurrency = 1
        runner.jobs_every_s = 1.0  # the default look at the jobs, once a second
        body = {"model": "scripted", "input": "hi", "background": True, "max_output_tokens": 400}
        ids = []
        for _ in range(2):
            made = await http.post("/v1/responses", json=body, headers=bearer(secret))
            assert made.status_code == 200, made.text
            ids.append(made.json()["id"])
        deadline = time.monotonic() + 30
        while not engine.running:
            assert time.monotonic() < deadline, "the first response never ran"
            await runner.step()
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # some tokens
        revoked_at = time.monotonic()
        response = await http.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN_KEY))
        assert response.status_code == 200, response.text

        async def statuses() -> list[str]:
            async with database.connect() as conn:
                rows = await conn.execute(
                    select(stored_responses.c.id, stored_responses.c.status).where(
                        stored_responses.c.id.in_(ids)
                    )
                )
                found = dict(rows.all())
            return [found[rid] for rid in ids]

        while await statuses() != ["cancelled", "cancelled"] or engine.running:
            assert time.monotonic() - revoked_at < 2.0, await statuses()
            await runner.step()  # a tick (the app's own runner ticks too)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        async with database.connect() as conn:
            rows = (await conn.execute(select(usage).where(usage.c.key_id == key_id))).all()
        assert [(r.request_id, r.outcome) for r in rows] == [(ids[0], "cancelled")]
        assert 0 < rows[0].completion_tokens < 400
