"""The response store on a real SQLite file and a real PostgreSQL server: bytes back as
stored, each row its owner's alone, chains read in two queries and bounded, expiry
before and by the purge."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.responses import stored_responses
from app.services.batches.retention import RetentionPurge
from app.storage import responses as module
from app.storage.database import TenantDatabase
from app.storage.responses import (
    DAY_S,
    ChainTooLong,
    ResponseLimits,
    ResponseNotFound,
    ResponseStore,
    StoredResponse,
    StoredTooLarge,
)

NOW = 1_800_000_000.0
A, B = "key_a", "key_b"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def items(*texts: str, prefix: str = "msg") -> bytes:
    return json.dumps(
        [
            {"id": f"{prefix}_{i}", "type": "message", "role": "user",
             "content": [{"type": "input_text", "text": text}]}
            for i, text in enumerate(texts)
        ]
    ).encode()  # fmt: skip


def stored(
    response_id: str,
    owner: str = A,
    previous: str | None = None,
    created_at: float = NOW,
    *,
    input_items: bytes | None = None,
    output_items: bytes | None = None,
) -> StoredResponse:
    body = {"id": response_id, "object": "response", "status": "completed", "output": []}
    return StoredResponse(
        id=response_id,
        owner=owner,
        model="scripted",
        created_at=created_at,
        previous_response_id=previous,
        status="completed",
        response=json.dumps(body).encode(),
        input_items=input_items if input_items is not None else items(f"to {response_id}"),
        output_items=output_items if output_items is not None else items(f"from {response_id}"),
    )


def store_on(database: AsyncEngine, clock: Clock | None = None, **limits: Any) -> ResponseStore:
    tenant = TenantDatabase(database.url.render_as_string(hide_password=False), database)
    return ResponseStore(tenant, ResponseLimits(**limits), clock or Clock())


@contextmanager
def statements(database: AsyncEngine) -> Iterator[list[str]]:
    """The SQL statements run on `database` inside the block."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(database.sync_engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(database.sync_engine, "before_cursor_execute", note)


async def test_what_is_saved_is_read_back_byte_for_byte(database: AsyncEngine) -> None:
    store = store_on(database)
    original = stored("resp_1", input_items=items("héllo ✓", "second"))
    await store.save(original)
    assert await store.get(A, "resp_1") == original


async def test_another_owner_gets_not_found_and_cannot_delete(database: AsyncEngine) -> None:
    store = store_on(database)
    await store.save(stored("resp_a"))
    for attempt in (store.get(B, "resp_a"), store.delete(B, "resp_a"), store.chain(B, "resp_a")):
        with pytest.raises(ResponseNotFound) as caught:
            await attempt
        assert caught.value.status_code == 404 and caught.value.code == "response_not_found"
    with pytest.raises(ResponseNotFound):
        await store.update(B, "resp_a", "failed", b"{}", b"[]")
    assert (await store.get(A, "resp_a")).status == "completed"  # untouched by B
    await store.delete(A, "resp_a")
    with pytest.raises(ResponseNotFound):
        await store.get(A, "resp_a")
    with pytest.raises(ResponseNotFound):
        await store.delete(A, "resp_a")


async def test_unknown_and_overlong_ids_are_not_found(database: AsyncEngine) -> None:
    store = store_on(database)
    for response_id in ("resp_missing", "r" * 10_000, ""):
        with pytest.raises(ResponseNotFound) as caught:
            await store.get(A, response_id)
        assert len(caught.value.message) < 200


async def test_a_chain_is_oldest_first_with_every_item(database: AsyncEngine) -> None:
    store = store_on(database)
    call = json.dumps([{"id": "fc_1", "type": "function_call", "call_id": "call_1",
                        "name": "weather", "arguments": "{}"}]).encode()  # fmt: skip
    output = json.dumps([{"id": "fco_1", "type": "function_call_output",
                          "call_id": "call_1", "output": "sunny"}]).encode()  # fmt: skip
    await store.save(stored("resp_1"))
    await store.save(stored("resp_2", previous="resp_1", output_items=call))
    await store.save(stored("resp_3", previous="resp_2", input_items=output))
    await store.save(stored("resp_2b", previous="resp_1"))  # a fork is not in resp_3's chain
    chain = await store.chain(A, "resp_3")
    assert [r.id for r in chain] == ["resp_1", "resp_2", "resp_3"]
    assert chain[1].output_items == call and chain[2].input_items == output
    assert [r.id for r in await store.chain(A, "resp_2b")] == ["resp_1", "resp_2b"]
    assert [r.id for r in await store.chain(A, "resp_1")] == ["resp_1"]


async def test_a_chain_of_fifty_is_read_in_two_queries(database: AsyncEngine) -> None:
    store = store_on(database)
    previous = None
    for i in range(50):
        await store.save(stored(f"resp_{i}", previous=previous))
        previous = f"resp_{i}"
    with statements(database) as seen:
        chain = await store.chain(A, "resp_49")
    assert [r.id for r in chain] == [f"resp_{i}" for i in range(50)]
    assert len([s for s in seen if s.lstrip().upper().startswith("SELECT")]) == 2


async def test_no_chain_across_owners(database: AsyncEngine) -> None:
    store = store_on(database)
    await store.save(stored("resp_a"))
    with pytest.raises(ResponseNotFound) as caught:
        await store.save(stored("resp_b", owner=B, previous="resp_a"))
    assert caught.value.param == "previous_response_id"
    with pytest.raises(ResponseNotFound):
        await store.get(B, "resp_b")  # nothing was stored


async def test_a_chain_over_its_length_is_refused(database: AsyncEngine) -> None:
    store = store_on(database, max_chain=3)
    await store.save(stored("resp_1"))
    await store.save(stored("resp_2", previous="resp_1"))
    assert len(await store.chain(A, "resp_2")) == 2  # a third may follow
    await store.save(stored("resp_3", previous="resp_2"))
    with pytest.raises(ChainTooLong) as caught:
        await store.chain(A, "resp_3")  # a fourth may not
    assert caught.value.status_code == 400 and caught.value.param == "previous_response_id"
    assert "at most 3" in caught.value.message
    with pytest.raises(ChainTooLong):
        await store.save(stored("resp_4", previous="resp_3"))
    with pytest.raises(ResponseNotFound):
        await store.get(A, "resp_4")


async def test_a_chain_over_its_bytes_is_refused_before_reading_bodies(
    database: AsyncEngine,
) -> None:
    one = len(items("to resp_1")) + len(items("from resp_1"))
    store = store_on(database, max_chain_bytes=2 * one + 10)
    await store.save(stored("resp_1"))
    await store.save(stored("resp_2", previous="resp_1"))
    with pytest.raises(ChainTooLong):
        await store.save(stored("resp_3", previous="resp_2"))
    big = items("x" * 3 * one)
    await store.save(stored("resp_big", input_items=big))  # alone it is no chain yet
    with statements(database) as seen, pytest.raises(ChainTooLong, match="bytes"):
        await store.chain(A, "resp_big")
    assert len(seen) == 1  # the head row's counts only


async def test_a_body_over_its_bound_is_too_large(database: AsyncEngine) -> None:
    store = store_on(database, max_stored_bytes=1000)
    with pytest.raises(StoredTooLarge) as caught:
        await store.save(stored("resp_big", output_items=items("y" * 1000)))
    assert caught.value.status_code == 400 and caught.value.code == "stored_response_too_large"
    await store.save(stored("resp_small"))
    with pytest.raises(StoredTooLarge):
        await store.update(A, "resp_small", "completed", b"{}", items("z" * 1000))
    assert (await store.get(A, "resp_small")).output_items == items("from resp_small")


async def test_update_changes_status_body_and_output(database: AsyncEngine) -> None:
    store = store_on(database)
    await store.save(stored("resp_bg"))
    await store.update(A, "resp_bg", "in_progress", b'{"status":"in_progress"}', b"[]")
    got = await store.get(A, "resp_bg")
    assert (got.status, got.response, got.output_items) == (
        "in_progress", b'{"status":"in_progress"}', b"[]",
    )  # fmt: skip
    assert got.input_items == items("to resp_bg")


async def test_expired_responses_are_never_read_then_purged(database: AsyncEngine) -> None:
    clock = Clock()
    store = store_on(database, clock, retention_s=30 * DAY_S)
    await store.save(stored("resp_old", created_at=NOW - 31 * DAY_S))
    await store.save(stored("resp_new", created_at=NOW - 29 * DAY_S))
    await store.save(stored("resp_next", previous="resp_new"))
    with pytest.raises(ResponseNotFound):
        await store.get(A, "resp_old")
    with pytest.raises(ResponseNotFound):
        await store.delete(A, "resp_old")
    with pytest.raises(ResponseNotFound):
        await store.save(stored("resp_cont", previous="resp_old"))
    clock.now = NOW + 2 * DAY_S  # resp_new expires; resp_next, its continuation, does not
    with pytest.raises(ResponseNotFound) as caught:
        await store.chain(A, "resp_next")
    assert caught.value.response_id == "resp_new"
    assert await store.purge_expired(clock.now) == 2
    assert await store.purge_expired(clock.now) == 0
    async with database.connect() as conn:
        left = list(await conn.execute(select(stored_responses.c.id)))
    assert [row.id for row in left] == ["resp_next"]


async def test_a_deleted_ancestor_is_named(database: AsyncEngine) -> None:
    store = store_on(database)
    await store.save(stored("resp_1"))
    await store.save(stored("resp_2", previous="resp_1"))
    await store.save(stored("resp_3", previous="resp_2"))
    await store.delete(A, "resp_2")
    with pytest.raises(ResponseNotFound) as caught:
        await store.chain(A, "resp_3")
    assert caught.value.response_id == "resp_2"
    assert (await store.get(A, "resp_3")).previous_response_id == "resp_2"


async def test_the_purge_deletes_in_batches(
    database: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "PURGE_BATCH", 2)
    store = store_on(database)
    for i in range(5):
        await store.save(stored(f"resp_{i}", created_at=NOW - 40 * DAY_S))
    await store.save(stored("resp_kept"))
    with statements(database) as seen:
        assert await store.purge_expired(NOW) == 5
    deletes = [s for s in seen if s.lstrip().upper().startswith("DELETE FROM STORED_RESPONSES")]
    assert len(deletes) == 3
    assert (await store.get(A, "resp_kept")).id == "resp_kept"


async def test_the_purge_creates_no_database(tmp_path: Path) -> None:
    path = tmp_path / "lilac.db"
    store = ResponseStore(TenantDatabase(f"sqlite:///{path}"))
    retention = RetentionPurge(store.database, 30 * DAY_S, responses=store)
    task = asyncio.create_task(retention.purge_forever(interval_s=0.01))
    await asyncio.sleep(0.05)
    task.cancel()
    assert not path.exists() and not store.database.opened


def test_limits_come_from_the_flags() -> None:
    from app.config.settings import Settings

    limits = ResponseLimits.from_settings(Settings(response_retention_days=1.5))
    assert limits.retention_s == 1.5 * DAY_S and limits.max_chain == 100
    with pytest.raises(SystemExit, match="--max-response-chain must be positive"):
        ResponseLimits.from_settings(Settings(max_response_chain=0))


async def test_the_server_purges_expired_responses_from_its_start(tmp_path: Path) -> None:
    """A server started on a database holding expired responses deletes them (its
    lifespan's purge), and keeps the fresh ones."""
    from app.config.settings import Settings
    from app.main import create_app
    from engine.scripted import ScriptedEngine
    from tests.client import provided

    url = f"sqlite:///{tmp_path}/lilac.db"
    earlier = ResponseStore(TenantDatabase(url), ResponseLimits(retention_s=DAY_S))
    now = time.time()
    await earlier.save(stored("resp_old", created_at=now - 2 * DAY_S))
    await earlier.save(stored("resp_new", created_at=now))
    await earlier.database.close()

    settings = Settings(auth="none", database_url=url, response_retention_days=1.0)
    app = create_app(settings, engine=ScriptedEngine())
    store: ResponseStore = provided(app, "response_store")
    async with app.lifespan():
        engine = await store.database.engine()
        for _ in range(200):
            async with engine.connect() as conn:
                left = [row.id for row in await conn.execute(select(stored_responses.c.id))]
            if left == ["resp_new"]:
                break
            await asyncio.sleep(0.02)
    assert left == ["resp_new"]
