"""What a group commit of usage rows writes to SQLite's journal (the WAL), with the
response ids the server makes: they sort in the order they were made, so the unique
index on `request_id` takes each commit's rows on its last page or two, where random
ids (a UUID4 each) put nearly every row on a page of its own; each page changed is a
page written to the journal and synced, and copied into the file at a checkpoint."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from app.db.engine import open_database
from app.db.sqlite import connect
from app.observability.context import new_request_id
from app.tenancy.usage.records import record_values
from app.tenancy.usage.statements import insert_rows
from tests.unit.app.tenancy.usage.test_usage_bounded import record

ROWS = 21  # rows a group commit holds under 64 clients (perf/RESULTS.md)
COMMITS = 40


def wal_frames(conn: sqlite3.Connection) -> int:
    """The pages written to the WAL since the last checkpoint."""
    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(frames)


def pages_per_commit(path: Path, make_id: Callable[[], str]) -> float:
    conn = connect(path)
    try:
        conn.execute("PRAGMA wal_autocheckpoint=0")  # count every frame
        # A table some thousands of rows deep, as after a few minutes of traffic.
        for _ in range(200):
            rows = [record_values(record("chatcmpl-" + make_id())) for _ in range(ROWS)]
            insert_rows(conn, rows)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(COMMITS):
            insert_rows(conn, [record_values(record("chatcmpl-" + make_id())) for _ in range(ROWS)])
        return wal_frames(conn) / COMMITS
    finally:
        conn.close()


async def test_a_commit_of_made_ids_writes_a_few_pages_not_one_a_row(tmp_path: Path) -> None:
    for name in ("made", "random"):
        await (await open_database(f"sqlite:///{tmp_path / name}.db")).dispose()
    made = pages_per_commit(tmp_path / "made.db", new_request_id)
    random = pages_per_commit(tmp_path / "random.db", lambda: uuid.uuid4().hex)
    # Measured: about 11 pages a commit of 21 rows with made ids (the table's and each
    # index's last pages, the file's header), about 30 with UUID4 ids.
    assert made <= 16, made
    assert random >= 2 * made, (made, random)
