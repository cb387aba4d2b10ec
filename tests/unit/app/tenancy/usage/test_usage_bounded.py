"""Nothing a tenant sends breaks another tenant's billing, on both backends: a long model
name or request id among concurrent requests, a row the database refuses (a dead letter
while the others commit), a spool replayed row by row, a repeated X-Request-Id, and
refusals kept as bounded counts."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import msgspec
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import REQUEST_ID_CHARS
from app.launch.cli import main
from app.observability.context import MAX_CLIENT_ID_CHARS
from app.tenancy.usage.records import DEAD_LETTER_FILE, UsageRecord
from app.tenancy.usage.writer import UsageWriter
from engine.scripted import ScriptedEngine
from tests.unit.app.tenancy.helpers import (
    ADMIN_KEY,
    URL,
    bearer,
    chat,
    dead_letters,
    keyed_app,
    new_key,
    refusal_counts,
    usage_rows,
)


def record(request_id: str, **changes: object) -> UsageRecord:
    fields: dict[str, object] = {
        "request_id": request_id,
        "key_id": "key_test",
        "model": "scripted",
        "endpoint": URL,
        "prompt_tokens": 5,
        "cached_tokens": 0,
        "completion_tokens": 3,
        "reasoning_tokens": 0,
        "n": 1,
        "outcome": "completed",
        "queue_ms": None,
        "ttft_ms": 1.0,
        "duration_ms": 2.0,
        "created_at": time.time(),
    }
    return UsageRecord(**{**fields, **changes})  # type: ignore[arg-type]


async def test_fourteen_concurrent_requests_with_a_long_model_and_a_long_request_id(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """One names a 300-character model (404), one sends a 120-character X-Request-Id:
    both are answered as they should be, and every valid request is billed at once."""
    spool = tmp_path / "usage-spool.jsonl"
    engine = ScriptedEngine(token_delay_s=0.05)  # they finish together: one group commit
    async with keyed_app(database, spool, engine) as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=None)
        long_id = "r" * 120
        calls = [http.post(URL, json=chat(), headers=bearer(secret)) for _ in range(12)]
        calls.append(http.post(URL, json=chat(model="m" * 300), headers=bearer(secret)))
        calls.append(
            http.post(URL, json=chat(), headers={**bearer(secret), "X-Request-Id": long_id})
        )
        answers = await asyncio.gather(*calls)
        rows = await usage_rows(database)  # awaited writes: durable before the answer
        report = await http.get("/admin/usage?by=key", headers=bearer(ADMIN_KEY))
    statuses = [a.status_code for a in answers]
    assert statuses == [200] * 12 + [404, 200]
    error = answers[12].json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert len(error["message"]) < 400
    assert answers[13].headers["x-request-id"] == "r" * MAX_CLIENT_ID_CHARS
    assert len(rows) == 13 and {r.outcome for r in rows} == {"completed"}
    assert {r.request_id for r in rows} == {a.json()["id"] for a in answers if a.is_success}
    assert max(len(r.request_id) for r in rows) <= REQUEST_ID_CHARS
    [long_row] = [r for r in rows if r.client_request_id is not None]
    assert long_row.client_request_id == "r" * MAX_CLIENT_ID_CHARS
    assert not spool.exists()
    [summary] = report.json()["data"]
    assert summary["requests"] == 13 and summary["completed"] == 13
    billed = sum(a.json()["usage"]["total_tokens"] for a in answers if a.is_success)
    assert summary["total_tokens"] == billed


async def test_a_row_the_database_refuses_is_set_aside_and_the_others_commit(
    database: AsyncEngine, tmp_path: Path
) -> None:
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    bad = [record("bad-null", model=None)]  # NOT NULL, refused by both backends
    if database.dialect.name == "postgresql":
        bad.append(record("bad-long", model="m" * 300))  # past VARCHAR(256)
    good = [record(f"good-{i}") for i in range(6)]
    await asyncio.gather(*(writer.write(r) for r in [good[0], *bad, *good[1:]]))
    await writer.close()
    rows = await usage_rows(database)
    letters = await dead_letters(database)
    assert sorted(r.request_id for r in rows) == sorted(r.request_id for r in good)
    assert [d.request_id for d in letters] == [r.request_id for r in bad]
    assert json.loads(letters[0].record)["request_id"] == "bad-null"
    assert "null" in letters[0].error.lower()
    assert writer.dead_lettered == len(bad) and writer.written == len(good)
    assert not writer.spool.exists()


async def test_the_dead_letter_metric_and_log_line(
    database: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        assert tenancy.writer is not None
        await tenancy.writer.write(record("bad", model=None))
        scrape = (await http.get("/metrics")).text
    assert "lilac_usage_dead_letter_total 1.0" in scrape
    lines = [r for r in caplog.records if "refused the record" in r.getMessage()]
    assert len(lines) == 1 and "'bad'" in lines[0].getMessage()


async def test_the_spool_replays_row_by_row_and_drops_nothing(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A spool left by an outage holds a record the database refuses and a torn last
    line: the good records are written, the others set aside, the spool is gone."""
    spool = tmp_path / "usage-spool.jsonl"
    lines = [json.dumps(_asdict(record(f"s-{i}"))) for i in (1, 2)]
    lines.insert(1, json.dumps(_asdict(record("s-bad", model=None))))
    old = _asdict(record("s-old"))
    del old["client_request_id"]  # written by a version without the column
    lines.append(json.dumps(old))
    lines.append('{"request_id": "s-torn", "key_')
    spool.write_text("\n".join(lines) + "\n")
    writer = UsageWriter(database, spool)
    await writer.close()
    rows = await usage_rows(database)
    assert sorted(r.request_id for r in rows) == ["s-1", "s-2", "s-old"]
    assert [d.request_id for d in await dead_letters(database)] == ["s-bad"]
    kept = (tmp_path / DEAD_LETTER_FILE).read_text().splitlines()
    assert len(kept) == 1 and "s-torn" in json.loads(kept[0])["record"]
    assert writer.dead_lettered == 2 and not spool.exists()


async def test_a_spool_replay_in_an_outage_keeps_every_line(
    database: AsyncEngine, tmp_path: Path
) -> None:
    from app.db.engine import create_engine

    spool = tmp_path / "usage-spool.jsonl"
    broken = create_engine(f"sqlite:///{tmp_path}/missing-folder/x.db")
    writer = UsageWriter(broken, spool)
    for i in range(3):
        await writer.write(record(f"o-{i}"))
    await writer.close()  # the replay fails too: nothing may be lost
    await broken.dispose()
    assert [json.loads(line)["request_id"] for line in spool.read_text().splitlines()] == [
        "o-0",
        "o-1",
        "o-2",
    ]
    assert writer.dead_lettered == 0
    writer.database = database
    await writer.close()
    assert [r.request_id for r in await usage_rows(database)] == ["o-0", "o-1", "o-2"]
    assert not spool.exists()


async def test_a_repeated_request_id_is_billed_once_per_request(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Two requests of one key and one of another key, all with X-Request-Id `dup-1`:
    three rows, each with its own tokens."""
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        a_id, a = await new_key(tenancy)
        b_id, b = await new_key(tenancy)
        answers = []
        for secret, tokens in ((a, 1), (a, 2), (b, 3)):
            headers = {**bearer(secret), "X-Request-Id": "dup-1"}
            answers.append(await http.post(URL, json=chat(max_tokens=tokens), headers=headers))
        rows = await usage_rows(database)
    assert [x.headers["x-request-id"] for x in answers] == ["dup-1"] * 3
    assert len({x.json()["id"] for x in answers}) == 3
    assert [(r.key_id, r.completion_tokens, r.client_request_id) for r in rows] == [
        (a_id, 1, "dup-1"),
        (a_id, 2, "dup-1"),
        (b_id, 3, "dup-1"),
    ]
    assert [r.request_id for r in rows] == [x.json()["id"] for x in answers]


async def test_refusals_are_bounded_counts_in_the_report(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A blocked key sending 60 requests leaves no usage row, only a count per minute
    and reason; the report shows them."""
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        key_id, blocked = await new_key(tenancy, rpm=0)
        _, limited = await new_key(tenancy, models=("other",))
        for _ in range(60):
            refused = await http.post(URL, json=chat(), headers=bearer(blocked))
            assert refused.status_code == 429
        assert (await http.post(URL, json=chat(), headers=bearer(limited))).status_code == 404
        await tenancy.writer.close()  # type: ignore[union-attr]
        admin = bearer(ADMIN_KEY)
        by_key = (await http.get("/admin/usage?by=key", headers=admin)).json()
        by_model = (await http.get("/admin/usage?by=model", headers=admin)).json()
        rows = await usage_rows(database)
        counts = await refusal_counts(database)
        async with database.connect() as conn:
            stored = (await conn.exec_driver_sql("SELECT count(*) FROM usage_refusals")).scalar()
    assert rows == []
    assert counts[(key_id, "rate_limit_exceeded")] == 60
    assert sum(counts.values()) == 61
    assert stored is not None and stored <= 4  # two keys, a reason each, a minute or two
    refused = {row["key"]: row["refused"] for row in by_key["data"]}
    assert refused[key_id] == 60 and sum(refused.values()) == 61
    assert [row["refused"] for row in by_model["data"] if row["model"] is None] == [61]
    reasons = {(r["key"], r["reason"]): r["refused"] for r in by_key["refusals"]}
    assert reasons[(key_id, "rate_limit_exceeded")] == 60
    assert set(reason for _, reason in reasons) == {"rate_limit_exceeded", "model_not_found"}


def test_the_usage_command_shows_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["keys", "create", "--name", "x", *data]) == 0
    capsys.readouterr()

    async def refuse() -> None:
        from app.db.engine import open_database

        engine = await open_database(f"sqlite:///{tmp_path}/lilac.db")
        writer = UsageWriter(engine, tmp_path / "spool")
        for _ in range(5):
            writer.refuse("key_x", "rate_limit_exceeded", time.time())
        await writer.close()
        await engine.dispose()

    asyncio.run(refuse())
    assert main(["usage", "--since", "2000-01-01", *data]) == 0
    out = capsys.readouterr().out
    assert "refused" in out.splitlines()[0]
    assert "key_x" in out and "rate_limit_exceeded  5" in out


def _asdict(item: UsageRecord) -> dict[str, object]:
    return msgspec.structs.asdict(item)


async def test_a_locked_database_spools_rows_and_sets_none_aside(tmp_path: Path) -> None:
    """A busy database (SQLite locked by another writer) is the database's failure, not
    the rows': they wait in the spool and are written once it is free."""
    import sqlite3

    from app.db.engine import create_engine, open_database

    path = tmp_path / "lilac.db"
    await (await open_database(f"sqlite:///{path}")).dispose()
    engine = create_engine(f"sqlite:///{path}", busy_timeout_ms=50)
    writer = UsageWriter(engine, tmp_path / "usage-spool.jsonl")
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        await asyncio.gather(*(writer.write(record(f"l-{i}")) for i in range(3)))
    finally:
        holder.rollback()
        holder.close()
    assert writer.dead_lettered == 0 and writer.spooled == 3
    await writer.close()
    assert sorted(r.request_id for r in await usage_rows(engine)) == ["l-0", "l-1", "l-2"]
    assert not writer.spool.exists()
    await engine.dispose()


def test_the_writer_has_its_own_connection_only_to_a_sqlite_file(tmp_path: Path) -> None:
    """Usage rows go through the writer's own connection to a SQLite file (one thread
    hand-over per group commit); an in-memory database or a URL with options keeps
    SQLAlchemy's engine, which alone reaches that database."""
    from app.db.engine import create_engine
    from app.tenancy.usage.sqlite import direct_path

    assert direct_path(create_engine(f"sqlite:///{tmp_path}/lilac.db")) == tmp_path / "lilac.db"
    assert direct_path(create_engine("sqlite:///:memory:")) is None
    assert direct_path(create_engine(f"sqlite:///{tmp_path}/lilac.db?mode=ro")) is None
    assert direct_path(create_engine("postgresql://u@localhost/db")) is None


async def test_a_replaced_database_gets_a_new_direct_connection(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """The writer follows `writer.database` (an operator's tool, a test, swapping it):
    rows never go to the file of an engine it no longer holds."""
    from app.db.engine import open_database

    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    await writer.write(record("first"))
    other = await open_database(f"sqlite:///{tmp_path}/other.db")
    writer.database = other
    await writer.write(record("second"))
    await writer.close()
    assert [r.request_id for r in await usage_rows(database)] == ["first"]
    assert [r.request_id for r in await usage_rows(other)] == ["second"]
    await other.dispose()
