"""Deferred work within its key's limits, over HTTP with the scripted engine and a real
keys database (both backends): a key's batch lines and background responses run at
most its `max_concurrent` at once and within its tokens per minute, counted apart from
its interactive requests (which its batch never refuses), while another key's batch
runs beside at its own limits."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from engine.scripted import ScriptedEngine
from tests.unit.app.deferred.test_batches_http import (
    CHAT,
    chat_line,
    create,
    finished,
    runner_of,
    upload,
)
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key


async def test_a_keys_lines_run_at_most_its_concurrency_and_never_refuse_its_requests(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(tokens=["x"] * 30, token_delay_s=0.02)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        runner = runner_of(http)
        runner.concurrency = 8
        capped_id, capped = await new_key(tenancy, rpm=None, max_concurrent=2)
        other_id, other = await new_key(tenancy, rpm=None, max_concurrent=3)
        mine = await create(
            http,
            capped,
            await upload(http, capped_id, [chat_line(f"c{i}", max_tokens=30) for i in range(6)]),
        )
        theirs = await create(
            http,
            other,
            await upload(http, other_id, [chat_line(f"o{i}", max_tokens=30) for i in range(6)]),
        )
        peak: dict[str, int] = {}
        engine_peak = 0
        interactive_answers: list[int] = []
        deadline = time.monotonic() + 60
        held = runner.limits._limiter._keys  # type: ignore[attr-defined]  # each key's deferred slots
        while True:
            await runner.step()
            await asyncio.sleep(0)  # the lines just started take their slots (or are refused)
            per_owner = {key: state.in_flight for key, state in held.items()}
            for owner, count in per_owner.items():
                peak[owner] = max(peak.get(owner, 0), count)
            engine_peak = max(engine_peak, len(engine.running))
            if per_owner.get(capped_id) == 2 and not interactive_answers:
                # The key's two deferred slots are taken: its own request still runs.
                body = {
                    "model": "scripted",
                    "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                answer = await http.post(CHAT, json=body, headers=bearer(capped))
                interactive_answers.append(answer.status_code)
            states = []
            for batch, secret in ((mine, capped), (theirs, other)):
                response = await http.get(f"/v1/batches/{batch['id']}", headers=bearer(secret))
                states.append(response.json()["status"])
            if states == ["completed", "completed"]:
                break
            assert time.monotonic() < deadline, states
            await asyncio.sleep(0.01)
        assert peak[capped_id] == 2, peak
        assert peak[other_id] == 3, peak
        assert interactive_answers == [200]
        assert engine_peak <= 2 + 3 + 1  # the two keys' lines, and the one interactive request
        for batch, secret in ((mine, capped), (theirs, other)):
            done = await finished(http, secret, batch)
            assert done["request_counts"] == {"total": 6, "completed": 6, "failed": 0}


async def test_a_keys_lines_wait_for_its_tokens_per_minute(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A key of 150 tokens a minute, lines of up to 100 output tokens: one line runs, the
    next waits until the key's deferred tokens have come back (the minute moves on
    here by the limiter's clock), then runs."""
    engine = ScriptedEngine(tokens=["x"] * 100, token_delay_s=0.0)
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        runner = runner_of(http)
        now = [time.monotonic()]
        runner.limits._limiter._clock = lambda: now[0]  # type: ignore[attr-defined]
        key_id, secret = await new_key(tenancy, rpm=None, tpm=150)
        lines = [chat_line(f"t{i}", max_tokens=100) for i in range(2)]
        batch = await create(http, secret, await upload(http, key_id, lines))

        async def counts() -> dict[str, int]:
            response = await http.get(f"/v1/batches/{batch['id']}", headers=bearer(secret))
            return dict(response.json()["request_counts"])

        deadline = time.monotonic() + 30
        while (await counts())["completed"] < 1:
            assert time.monotonic() < deadline, "the first line never ran"
            await runner.step()
            await asyncio.sleep(0.01)
        for _ in range(20):  # the second line waits: its key's tokens are spent
            await runner.step()
            await asyncio.sleep(0.01)
        assert (await counts())["completed"] == 1
        assert runner.stats.cut >= 1  # tried, refused before any work, not counted
        now[0] += 61.0  # a minute later: the bucket is full again
        runner._resting.clear()  # type: ignore[attr-defined]  # the runner's own wait, over too
        done = await finished(http, secret, batch)
        assert done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
