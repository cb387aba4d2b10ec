"""`lilac-serve usage --by batch`: batch work summed per batch, interactive work apart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import insert

from app.db.engine import open_database
from app.db.schema import usage
from app.launch.cli import main


def _row(request_id: str, batch_id: str | None, completion: int) -> dict[str, object]:
    return {
        "request_id": request_id, "key_id": "k1", "model": "m", "endpoint": "/v1/completions",
        "prompt_tokens": 2, "cached_tokens": 0, "completion_tokens": completion,
        "reasoning_tokens": 0, "n": 1, "outcome": "completed", "queue_ms": None,
        "ttft_ms": None, "duration_ms": 1.0, "created_at": 1_000_000.0, "day": "1970-01-12",
        "batch_id": batch_id,
    }  # fmt: skip


def test_usage_by_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/lilac.db"

    async def seed() -> None:
        database = await open_database(url)
        rows = [_row("a", "batch_1", 4), _row("b", "batch_1", 5), _row("c", None, 7)]
        async with database.begin() as conn:
            await conn.execute(insert(usage), rows)
        await database.dispose()

    asyncio.run(seed())
    assert main(["usage", "--by", "batch", "--format", "json", "--database-url", url]) == 0
    report = {row["batch"]: row for row in json.loads(capsys.readouterr().out)}
    assert report["batch_1"]["requests"] == 2 and report["batch_1"]["completion_tokens"] == 9
    assert report[None]["requests"] == 1 and report[None]["completion_tokens"] == 7
