"""Bounded retries of batch lines (both databases): a line whose run keeps failing inside
the engine runs `MAX_FAILED_RUNS` times and is answered failed with the engine's error;
a line cut `MAX_CUT_RUNS` times (no fault of its own, so the larger bound) is answered
failed without another run. Both are in the batch's error file and `request_counts`; a
background response, a line too, ends `failed` with the engine's error."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from app.deferred.work import INTERRUPTED, MAX_CUT_RUNS, MAX_FAILED_RUNS
from engine.errors import EngineError
from engine.protocol import GenerateOutput, GenerateRequest
from engine.scripted import ScriptedEngine
from tests.unit.app.deferred.test_background_http import finished as finished_response
from tests.unit.app.deferred.test_background_http import queue
from tests.unit.app.deferred.test_batches_http import (
    chat_line,
    create,
    file_lines,
    finished,
    runner_of,
    upload,
    validated,
)
from tests.unit.app.tenancy.helpers import keyed_app, new_key


class FailingEngine(ScriptedEngine):
    """Every generation fails inside the engine; `runs` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.runs += 1
        raise EngineError("the engine fell over")
        yield  # pragma: no cover - an async generator that never yields


async def test_a_line_that_keeps_failing_ends_failed_with_its_error(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = FailingEngine()
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        batch = await create(http, secret, await upload(http, key_id, [chat_line("a")]))
        done = await finished(http, secret, batch)
        assert engine.runs == MAX_FAILED_RUNS
        assert runner_of(http).stats.failed == MAX_FAILED_RUNS - 1
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
        assert done["output_file_id"] is None
        [error] = await file_lines(http, key_id, done["error_file_id"])
    assert error["custom_id"] == "a"
    assert error["response"]["status_code"] == 500
    assert error["response"]["body"]["error"]["code"] == "engine_error"


async def test_a_line_cut_too_often_ends_failed_without_another_run(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        lines = [chat_line("cut"), chat_line("fine")]
        batch = await create(http, secret, await upload(http, key_id, lines))
        runner = runner_of(http)
        await validated(runner)
        # The first line started and cut, as the runner cuts it, over and over: one cut
        # through the runner itself, the rest as its release records them.
        await runner.step()
        await runner.cut_all()
        assert runner.stats.cut == 2
        for _ in range(MAX_CUT_RUNS - 1):
            [line] = await runner.store.claim(batch["id"], runner.replica, 1, 60)
            assert line.seq == 0
            assert await runner.store.release(batch["id"], 0, runner.replica)
        engine.requests.clear()
        done = await finished(http, secret, batch)
        assert len(engine.requests) == 1  # only the other line ran
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
        [out] = await file_lines(http, key_id, done["output_file_id"])
        [error] = await file_lines(http, key_id, done["error_file_id"])
    assert out["custom_id"] == "fine"
    assert error["custom_id"] == "cut" and error["response"] is None
    assert error["error"]["code"] == INTERRUPTED


async def test_a_background_response_that_keeps_failing_ends_failed(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = FailingEngine()
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        queued = await queue(http, secret)
        done = await finished_response(http, secret, queued["id"])
        assert engine.runs == MAX_FAILED_RUNS
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "engine_error"
