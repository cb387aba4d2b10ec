"""Usage records and the writer that makes them durable.

Each request becomes one `UsageRecord`. `UsageWriter.write` returns once the record is
committed: the generation routes await it before the client gets the last byte of
the response, so a completed request is never billed from memory alone. Records that
arrive together are committed together (one transaction: a group commit).

When the database fails, the batch goes to an append-only spool file (JSON lines,
fsynced) next to the database and `write` still returns: the record is durable on
local disk. The writer retries the spool every second and inserts it once the
database is back; `request_id` is unique, so a record spooled twice is written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.keys import KeyStore
from app.tenancy.schema import usage

log = logging.getLogger("lilac.usage")

OUTCOMES = ("completed", "cancelled", "drained", "error", "rejected")
RETRY_S = 1.0
# A key's `last_used_at` is written at most this often: a transaction of its own per
# batch would double the commits for a field `keys list` shows to the minute.
TOUCH_EVERY_S = 30.0


@dataclass(slots=True)
class UsageRecord:
    request_id: str
    key_id: str | None
    model: str
    endpoint: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    n: int
    outcome: str
    queue_ms: float | None
    ttft_ms: float | None
    duration_ms: float
    created_at: float
    day: str = ""

    def __post_init__(self) -> None:
        if not self.day:
            self.day = time.strftime("%Y-%m-%d", time.gmtime(self.created_at))


class UsageWriter:
    """Group-committing, spooling writer of usage records (one task per process)."""

    def __init__(self, engine: AsyncEngine, spool: Path, keys: KeyStore | None = None) -> None:
        self.engine = engine
        self.spool = spool
        self._keys = keys
        self._pending: list[tuple[UsageRecord, asyncio.Future[None] | None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.db_ok = True
        self.written = 0
        self.spooled = 0
        self._touched: dict[str, float] = {}  # key id -> created_at last written

    def start(self) -> None:
        if self._task is None:
            self._closing = False
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def write(self, record: UsageRecord) -> None:
        """Returns when the record is committed (or spooled to disk)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((record, future))
        self._wake.set()
        self.start()  # started by the app's lifespan; else (a tool, a test) on first use
        await asyncio.shield(future)

    def submit(self, record: UsageRecord) -> None:
        """Queue a record without waiting (a cancelled request: nobody waits for it)."""
        self._pending.append((record, None))
        self._wake.set()
        self.start()

    async def close(self) -> None:
        """Write everything queued (SIGTERM, shutdown); then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._flush()

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RETRY_S)
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        if self.spool.exists() and self.spool.stat().st_size:
            await self._replay_spool()
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        records = [record for record, _ in batch]
        try:
            await self._insert(records)
            self.written += len(records)
            self._mark(True)
        except Exception as exc:
            self._mark(False, exc)
            self._append_spool(records)
        for _, future in batch:
            if future is not None and not future.done():
                future.set_result(None)

    async def _insert(self, records: list[UsageRecord]) -> None:
        rows = [dataclasses.asdict(record) for record in records]
        dialect = self.engine.dialect.name
        builder = pg_insert if dialect == "postgresql" else sqlite_insert
        statement = builder(usage).on_conflict_do_nothing(index_elements=["request_id"])
        async with self.engine.begin() as conn:
            await conn.execute(statement, rows)
        if self._keys is not None:
            last_used: dict[str, float] = {}
            for record in records:
                key_id = record.key_id
                if key_id is not None and (
                    record.created_at - self._touched.get(key_id, 0.0) >= TOUCH_EVERY_S
                ):
                    last_used[key_id] = self._touched[key_id] = record.created_at
            await self._keys.touch(last_used)

    def _append_spool(self, records: list[UsageRecord]) -> None:
        lines = "".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records)
        with open(self.spool, "a", encoding="utf-8") as file:
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())
        self.spooled += len(records)

    async def _replay_spool(self) -> None:
        try:
            text = self.spool.read_text(encoding="utf-8")
            records = [UsageRecord(**json.loads(line)) for line in text.splitlines() if line]
            await self._insert(records)
        except Exception as exc:
            self._mark(False, exc)
            return
        # Only what was read is removed: a concurrent append cannot happen (one task).
        self.spool.unlink()
        self.written += len(records)
        self._mark(True)
        log.info("usage: wrote %d spooled records to the database", len(records))

    def _mark(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and not self.db_ok:
            log.warning("usage: the database is back")
        elif not ok and self.db_ok:
            log.error("usage: database write failed (%s); spooling to %s", exc, self.spool)
        self.db_ok = ok


def describe(record: UsageRecord) -> dict[str, Any]:
    return dataclasses.asdict(record)
