"""Group commit: requests that end close together share one usage commit (counted in
the SQLite file's write-ahead log, not by the writer), and every request's row is
committed, read back by a connection of its own, at the moment its response's last
byte leaves the app; a lone request is never held for others."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.config.settings import Settings
from app.db.schema import usage
from app.main import create_app
from app.tenancy.service import Tenancy
from app.tenancy.usage.commit_window import BATCH_ROWS, CommitWindow
from app.tenancy.usage.writer import UsageWriter
from engine.scripted import ScriptedEngine
from tests.unit.app.tenancy.helpers import URL, chat, new_key, usage_rows

CLIENTS = 16
WAL_HEADER = 32
FRAME_HEADER = 24


def wal_commits(database_file: Path) -> int:
    """Commits in the database's write-ahead log: its frames that end a transaction
    (a non-zero database size) and carry the log's current salts (older frames of a
    log SQLite started over do not)."""
    wal = database_file.with_name(database_file.name + "-wal")
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < WAL_HEADER:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0] or 65536
    salts = data[16:24]
    commits = 0
    for at in range(WAL_HEADER, len(data) - FRAME_HEADER + 1, FRAME_HEADER + page_size):
        _page, size_after = struct.unpack(">II", data[at : at + 8])
        if data[at + 8 : at + 16] != salts:
            break
        commits += size_after != 0
    return commits


async def call(app: Any, body: bytes, secret: str, at_last_byte: Any) -> bytes:
    """POST `body` straight into the ASGI app; `at_last_byte(bytes so far)` is awaited
    when the app hands over the response's last body part, before the send returns."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"host", b"test"),
            (b"authorization", f"Bearer {secret}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent = False
    done = asyncio.Event()
    parts: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await done.wait()
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                await at_last_byte(b"".join(parts))
                done.set()

    await app(scope, receive, send)
    return b"".join(parts)


def response_id(data: bytes) -> str:
    if data.startswith(b"data: "):
        first = data.split(b"\n\n", 1)[0][len(b"data: ") :]
        return str(json.loads(first)["id"])
    return str(json.loads(data)["id"])


@pytest.mark.parametrize("stream", [False, True])
async def test_concurrent_requests_share_commits_and_each_row_is_durable_at_its_last_byte(
    database: AsyncEngine, tmp_path: Path, stream: bool
) -> None:
    tenancy = Tenancy.with_database(database, tmp_path / "spool")
    engine = ScriptedEngine(token_delay_s=0.02)
    app = create_app(Settings(auth="keys"), engine=engine, tenancy=tenancy)
    # Another connection than any the server holds: it sees committed rows only.
    reader = create_async_engine(database.url, poolclass=NullPool)
    seen: list[bool] = []

    async def row_is_committed(data: bytes) -> None:
        async with reader.connect() as conn:
            found = await conn.execute(
                select(usage.c.request_id).where(usage.c.request_id == response_id(data))
            )
            seen.append(found.first() is not None)

    body = json.dumps(chat(stream=stream)).encode()
    file = Path(database.url.database or "") if database.dialect.name == "sqlite" else None
    try:
        async with app.lifespan():
            _, secret = await new_key(tenancy)
            await call(app, body, secret, row_is_committed)  # the key is cached, touched
            before = wal_commits(file) if file is not None else 0

            async def client(position: int) -> bytes:
                await asyncio.sleep(0.003 * position)  # they end a few ms apart
                return await call(app, body, secret, row_is_committed)

            await asyncio.gather(*(client(i) for i in range(CLIENTS)))
            after = wal_commits(file) if file is not None else 0
    finally:
        await reader.dispose()
    assert seen == [True] * (CLIENTS + 1)
    rows = await usage_rows(database)
    assert [row.outcome for row in rows] == ["completed"] * (CLIENTS + 1)
    if file is not None:
        # One commit a row would be CLIENTS; requests ending within the window share.
        # Half that, not fewer: on a loaded machine the event loop runs late, and the 16
        # requests, meant to end 3 ms apart, spread over more windows (5 commits seen).
        assert 1 <= after - before <= CLIENTS // 2, (before, after)


async def test_a_lone_request_is_not_held_and_others_running_hold_a_batch() -> None:
    window = CommitWindow(window_s=60.0)  # the timer never ends a hold here
    for _ in range(4):  # rows come often, each after the last commit ended
        window.arrived()
        window.taken()
        window.committed()
    window.opened()
    window.closed()
    window.arrived()
    await window.hold()  # nobody else runs: returns at once, without the window
    window.taken()
    window.committed()

    window.opened()  # two run; the first ends
    window.opened()
    window.closed()
    window.arrived()
    holding = asyncio.ensure_future(window.hold())
    await asyncio.sleep(0)
    assert not holding.done()  # the other may join
    window.closed()  # ...the other ended: nobody is left to join
    await asyncio.sleep(0)
    assert holding.done()
    await holding


async def test_rows_that_came_during_the_last_commit_are_held_though_none_is_admitted() -> None:
    """The event loop busy and generation quick: requests are admitted and end one at a
    time, so none is counted running when the writer looks, yet rows keep arriving while
    each commit runs. Such a batch waits out the window (or fills), and the count
    reaching 0 does not end it; the batch after a commit nobody overlapped is not held."""
    window = CommitWindow(window_s=60.0)
    for _ in range(4):  # rows come often
        window.arrived()
        window.taken()
        window.committed()
    window.arrived()
    window.taken()  # a commit runs...
    window.opened()
    window.closed()
    window.arrived()  # ...and a row arrives meanwhile, its request already ended
    window.committed()
    holding = asyncio.ensure_future(window.hold())
    await asyncio.sleep(0)
    assert not holding.done()  # more rows will come: the batch waits for them
    window.opened()
    window.closed()  # nobody counted running any more: still held
    window.arrived()
    await asyncio.sleep(0)
    assert not holding.done()
    for _ in range(BATCH_ROWS - 2):  # until the batch is full
        window.arrived()
    await asyncio.sleep(0)
    assert holding.done()
    await holding
    window.taken()  # this commit: no row arrives while it runs
    window.committed()
    window.opened()
    window.closed()
    window.arrived()
    await window.hold()  # returns at once


async def test_a_batch_beyond_one_statement_commits_once_and_a_refused_row_spares_the_rest(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """150 rows queued together are one commit of several statements (one transaction);
    a repeated id is written once; a row the database refuses among 150 others is set
    aside and the others are committed."""
    from tests.unit.app.tenancy.usage.test_usage_bounded import record

    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    file = Path(database.url.database or "") if database.dialect.name == "sqlite" else None
    await writer.write(record("first"))  # the writer's connection is open
    before = wal_commits(file) if file is not None else 0
    batch = [record(f"many-{i}") for i in range(150)] + [record("many-7")]
    await asyncio.gather(*(writer.write(r) for r in batch))
    after = wal_commits(file) if file is not None else 0
    refused = [record(f"more-{i}") for i in range(150)]
    refused.insert(75, record("bad-null", model=None))  # NOT NULL: refused by both backends
    await asyncio.gather(*(writer.write(r) for r in refused))
    await writer.close()
    rows = {row.request_id for row in await usage_rows(database)}
    assert rows == {"first"} | {f"many-{i}" for i in range(150)} | {f"more-{i}" for i in range(150)}
    assert writer.dead_lettered == 1
    if file is not None:
        assert after - before == 1
