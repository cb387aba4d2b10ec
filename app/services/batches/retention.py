"""Retention of tenant data, one round an hour for all of it: each round deletes the
stored responses past `--response-retention-days` (app.storage.responses), the batches
ended longer than `--batch-retention-days` ago (their lines, then the job; their output
and error files are made to expire at once), then every expired file
(app.storage.file_purge), each in bounded steps so that the tenant database is never
held long.

A batch not yet ended is never deleted, and the input file of one is kept past its
expiry (readers no longer see it, but the batch still reads it) until it has ended.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, select

from app.db.deferred import deferred_jobs
from app.deferred.store import DeferredStore
from app.schemas.batches import FINAL_STATUSES
from app.services.batches.jobs import KIND
from app.storage.database import TenantDatabase
from app.storage.file_purge import FilePurge
from app.storage.responses import ResponseStore
from engine.ticks import sleep_to_tick

log = logging.getLogger("lilac.retention")

DAY_S = 86_400.0
# Ended batches read a round, and lines deleted a transaction.
PURGE_BATCHES = 100
PURGE_LINES = 500
# How often each server purges; readers never see expired files in between.
PURGE_INTERVAL_S = 3600.0


@dataclass(frozen=True, slots=True)
class Purged:
    batches: int
    files: int
    responses: int = 0


class RetentionPurge:
    def __init__(
        self,
        database: TenantDatabase,
        batch_retention_s: float,
        *,
        files: FilePurge | None = None,
        responses: ResponseStore | None = None,
        clock: Callable[[], float] = time.time,
        lines_per_step: int = PURGE_LINES,
    ) -> None:
        self.database = database
        self.batch_retention_s = batch_retention_s
        self.files = files or FilePurge(database)
        self.store = DeferredStore(database)
        self.responses = responses
        self._clock = clock
        self.lines_per_step = lines_per_step

    async def purge(self, now: float) -> Purged:
        """One round at `now`: stored responses and ended batches past retention, then
        expired files."""
        responses = 0 if self.responses is None else await self.responses.purge_expired(now)
        batches = await self.purge_batches(now)
        keep = await self._live_inputs()
        return Purged(batches, await self.files.purge_expired(now, keep), responses)

    async def purge_batches(self, now: float) -> int:
        """Delete the batches that ended before `now` less the retention; how many."""
        if self.batch_retention_s <= 0:
            return 0
        cutoff = now - self.batch_retention_s
        jobs = deferred_jobs.c
        ended = (
            select(jobs.id, jobs.result)
            .where(jobs.kind == KIND, jobs.state.in_(FINAL_STATUSES), jobs.updated_at < cutoff)
            .limit(PURGE_BATCHES)
        )
        engine = await self.database.engine()
        total = 0
        while True:
            async with engine.connect() as conn:
                rows = (await conn.execute(ended)).all()
            for row in rows:
                await self.files.expire(_result_files(row.result), now)
                await self.store.clear_lines(row.id, self.lines_per_step)
                async with engine.begin() as conn:
                    await conn.execute(delete(deferred_jobs).where(jobs.id == row.id))
            total += len(rows)
            if len(rows) < PURGE_BATCHES:
                return total

    async def _live_inputs(self) -> set[str]:
        """The input files of the batches not yet ended (a key has at most
        `--max-live-batches` of them)."""
        jobs = deferred_jobs.c
        live = select(jobs.payload).where(jobs.kind == KIND, jobs.state.not_in(FINAL_STATUSES))
        engine = await self.database.engine()
        async with engine.connect() as conn:
            payloads = (await conn.execute(live)).scalars().all()
        return {str(json.loads(payload).get("input_file_id")) for payload in payloads}

    async def purge_forever(self, interval_s: float = PURGE_INTERVAL_S) -> None:
        """Purge now and then every `interval_s`, for the server's lifetime; a database
        not yet made is left alone, one unreachable is tried again at the next round."""
        while True:
            if self.database.exists():
                try:
                    purged = await self.purge(self._clock())
                    if purged.batches or purged.files or purged.responses:
                        log.info(
                            "purged %d ended batches, %d expired files, %d expired stored "
                            "responses",
                            *_counts(purged),
                        )
                except Exception as exc:  # the database may be down: try again later
                    log.warning("purging expired tenant data failed: %s", exc)
            await sleep_to_tick(interval_s)  # on the grid of the periodic work


def _result_files(result: str | None) -> list[str]:
    """The output and error file ids a batch's result names."""
    found = json.loads(result) if result else {}
    return [found[name] for name in ("output_file_id", "error_file_id") if found.get(name)]


def _counts(purged: Purged) -> tuple[int, int, int]:
    return purged.batches, purged.files, purged.responses
