"""Two replicas (two apps, each its engine and runner) over one database share a batch:
both run lines of it, and every line is answered once and billed once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage
from app.deferred.runner import DeferredRunner
from engine.scripted import ScriptedEngine
from tests.client import provided
from tests.unit.app.deferred.test_batches_http import (
    chat_line,
    create,
    file_lines,
    status_of,
    upload,
)
from tests.unit.app.tenancy.helpers import keyed_app, new_key


def named(runner: DeferredRunner, name: str) -> DeferredRunner:
    runner.replica = name
    runner.handlers["batch"].replica = name  # type: ignore[attr-defined]
    runner.tick_s = 0.02
    runner.jobs_every_s = 0.05
    runner.idle_jobs_every_s = 0.05  # the other replica's new batch, found at once
    runner.concurrency = 3
    return runner


async def test_two_replicas_split_one_batch(database: AsyncEngine, tmp_path: Path) -> None:
    tokens = ["x"] * 20
    async with (
        keyed_app(database, tmp_path / "one.jsonl", ScriptedEngine(tokens, token_delay_s=0.005))
        as (one, tenancy),
        keyed_app(database, tmp_path / "two.jsonl", ScriptedEngine(tokens, token_delay_s=0.005))
        as (two, _),
    ):  # fmt: skip
        key_id, secret = await new_key(tenancy)
        lines = [chat_line(f"r{i}", max_tokens=20) for i in range(24)]
        batch = await create(one, secret, await upload(one, key_id, lines))
        runners = [
            named(provided(one.app, "batch_runner"), "replica-one"),
            named(provided(two.app, "batch_runner"), "replica-two"),
        ]
        for runner in runners:
            runner.start()
        try:
            for _ in range(1000):
                done = await status_of(two, secret, batch["id"])  # read on the other replica
                if done["status"] == "completed":
                    break
                await asyncio.sleep(0.02)
        finally:
            for runner in runners:
                await runner.close()
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 24, "completed": 24, "failed": 0}
        answered = [runner.stats.answered for runner in runners]
        assert sum(answered) == 24 and min(answered) > 0, answered
        assert sum(runner.stats.lost for runner in runners) == 0
        out = await file_lines(one, key_id, done["output_file_id"])
        assert sorted(line["custom_id"] for line in out) == sorted(f"r{i}" for i in range(24))
        async with database.connect() as conn:
            rows = (
                await conn.execute(
                    select(usage.c.request_id).where(usage.c.batch_id == batch["id"])
                )
            ).all()
        assert len(rows) == len({row[0] for row in rows}) == 24
