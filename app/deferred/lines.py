"""The deferred store's line leases: counting, claiming, renewing, releasing, answering
and closing a job's lines. Every change of a line is one conditional `UPDATE ... WHERE`
(see `app.deferred.store`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.deferred import deferred_lines
from app.db.schema import usage
from app.deferred.records import (
    ANSWERED,
    PENDING,
    RUN,
    RUNNING,
    UNFINISHED,
    Line,
    LineCounts,
    held_by,
)
from app.storage.database import TenantDatabase
from app.tenancy.prices.store import price_in, record_cost
from app.tenancy.usage.records import UsageRecord, record_row


class LineLeases:
    """The line half of `DeferredStore`, and the tenant database both halves use."""

    def __init__(self, database: TenantDatabase, clock: Callable[[], float] = time.time) -> None:
        self.database = database
        self.clock = clock

    async def _engine(self) -> AsyncEngine:
        return await self.database.engine()

    async def counts(self, job_ids: list[str]) -> dict[str, LineCounts]:
        out = {job_id: LineCounts() for job_id in job_ids}
        if not job_ids:
            return out
        lines = deferred_lines.c
        statement = (
            select(
                lines.job_id,
                lines.state,
                func.count(),
                func.coalesce(func.sum(lines.ok), 0),
                func.coalesce(func.sum(lines.prompt_tokens), 0),
                func.coalesce(func.sum(lines.completion_tokens), 0),
            )
            .where(lines.job_id.in_(job_ids))
            .group_by(lines.job_id, lines.state)
        )
        engine = await self._engine()
        async with engine.connect() as conn:
            for job_id, state, count, ok, prompt, completion in await conn.execute(statement):
                counts = out[job_id]
                counts.by_state[state] = int(count)
                counts.ok += int(ok)
                counts.prompt_tokens += int(prompt)
                counts.completion_tokens += int(completion)
        return out

    def _claimable(self, now: float) -> Any:
        lines = deferred_lines.c
        return or_(lines.state == PENDING, and_(lines.state == RUNNING, lines.lease_until < now))

    async def claim(self, job_id: str, replica: str, limit: int, lease_s: float) -> list[Line]:
        """Up to `limit` lines of the job, in input order: pending ones, and running ones
        whose lease ran out. Each is claimed by its own conditional UPDATE, so a line
        another replica took in between is skipped."""
        if limit <= 0:
            return []
        now = self.clock()
        lines = deferred_lines.c
        candidates = (
            select(lines.seq, lines.body, lines.attempts)
            .where(lines.job_id == job_id, self._claimable(now))
            .order_by(lines.seq)
            .limit(limit)
        )
        engine = await self._engine()
        claimed: list[Line] = []
        async with engine.begin() as conn:
            rows = (await conn.execute(candidates)).all()
            for seq, body, attempts in rows:
                changed = await conn.execute(
                    update(deferred_lines)
                    .where(lines.job_id == job_id, lines.seq == seq, self._claimable(now))
                    .values(
                        state=RUNNING,
                        lease_owner=replica,
                        lease_until=now + lease_s,
                        attempts=lines.attempts + RUN,
                    )
                )
                if changed.rowcount == 1:
                    claimed.append(Line(job_id, seq, body, attempts + RUN))
        return claimed

    async def renew(self, replica: str, held: list[tuple[str, int]], lease_s: float) -> None:
        """Extend the leases of the lines this replica is running."""
        if not held:
            return
        until = self.clock() + lease_s
        engine = await self._engine()
        async with engine.begin() as conn:
            for job_id, seq in held:
                await conn.execute(
                    update(deferred_lines)
                    .where(held_by(job_id, seq, replica))
                    .values(lease_until=until)
                )

    async def release(
        self, job_id: str, seq: int, replica: str, record: UsageRecord | None = None
    ) -> bool:
        """A line cut before its answer (a drain, a restart, capacity taken back): pending
        again, to run later; its run stays counted among its cut ones (`Line.cut_runs`),
        and what the run did (`record`, under the run's own id) is billed with it."""
        records = {(job_id, seq): record} if record is not None else None
        return await self.release_many([(job_id, seq)], replica, records=records) == 1

    async def release_many(
        self,
        held: list[tuple[str, int]],
        replica: str,
        counted: bool = True,
        records: dict[tuple[str, int], UsageRecord] | None = None,
    ) -> int:
        """`release` for many lines in one transaction (lines cut together: one commit,
        not one each), their runs' usage rows (`records`) in it; answers how many were
        still this replica's to release. Not `counted`: the runs were refused before any
        work, and their claims are undone (`Line.cut_runs` as before them)."""
        if not held:
            return 0
        lines = deferred_lines.c
        values: dict[str, Any] = {"state": PENDING, "lease_owner": None, "lease_until": None}
        if not counted:
            values["attempts"] = lines.attempts - RUN
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(or_(*(held_by(job_id, seq, replica) for job_id, seq in held)))
                .values(**values)
            )
            for (job_id, seq), record in (records or {}).items():
                await _bill_run(conn, job_id, seq, record)
        return int(changed.rowcount)

    async def failed(
        self, job_id: str, seq: int, replica: str, record: UsageRecord | None = None
    ) -> bool:
        """A line whose run failed (an engine error), to run again: pending, the run
        counted among its failed ones (`Line.failed_runs`) rather than its cut ones, and
        what it did (`record`) billed. False when the line was no longer this
        replica's (the run is billed all the same)."""
        lines = deferred_lines.c
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(held_by(job_id, seq, replica))
                .values(
                    state=PENDING,
                    lease_owner=None,
                    lease_until=None,
                    attempts=lines.attempts - RUN + 1,
                )
            )
            if record is not None:
                await _bill_run(conn, job_id, seq, record)
        return changed.rowcount == 1

    async def bill_run(self, job_id: str, seq: int, record: UsageRecord) -> None:
        """Bill a run that cannot answer or release its line (the line was closed or
        taken meanwhile): the engine worked on it all the same."""
        engine = await self._engine()
        async with engine.begin() as conn:
            await _bill_run(conn, job_id, seq, record)

    async def answer(
        self,
        job_id: str,
        seq: int,
        replica: str,
        result: str,
        ok: bool,
        record: UsageRecord | None,
    ) -> bool:
        """Answer a running line this replica holds: its result, its state and its usage
        row in one transaction. False (and nothing written) when the lease was lost: the
        replica that holds the line now answers it."""
        lines = deferred_lines.c
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(held_by(job_id, seq, replica))
                .values(
                    state=ANSWERED,
                    result=result,
                    ok=int(ok),
                    lease_owner=None,
                    lease_until=None,
                    finished_at=self.clock(),
                    # Added to what the line's earlier runs (cut, failed) were billed.
                    prompt_tokens=lines.prompt_tokens
                    + (record.prompt_tokens if record is not None else 0),
                    completion_tokens=lines.completion_tokens
                    + (record.completion_tokens if record is not None else 0),
                )
            )
            if changed.rowcount != 1:
                return False
            if record is not None:
                await _insert_usage(conn, record)
        return True

    async def close_pending(self, job_id: str, to: str, running: bool = False) -> int:
        """End the job's pending lines (`expired`, `cancelled`); running ones go on, unless
        `running`: then they end too, on whichever replica runs them (its answer is
        refused, and it stops them when it next looks at what it holds: `held`)."""
        lines = deferred_lines.c
        states = UNFINISHED if running else (PENDING,)
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(lines.job_id == job_id, lines.state.in_(states))
                .values(state=to, lease_owner=None, lease_until=None, finished_at=self.clock())
            )
        return int(changed.rowcount)

    async def held(self, replica: str, running: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Of the lines this replica runs, those still running under its lease (a line
        closed meanwhile, or taken by another replica, is left out)."""
        if not running:
            return set()
        lines = deferred_lines.c
        statement = select(lines.job_id, lines.seq).where(
            or_(*(held_by(job_id, seq, replica) for job_id, seq in running))
        )
        engine = await self._engine()
        async with engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return {(job_id, seq) for job_id, seq in rows}

    async def finished_lines(
        self, job_id: str, chunk: int = 500
    ) -> AsyncIterator[tuple[int, str, str, str | None, bool]]:
        """(seq, state, body, result, ok) of every line, in input order, a page at a time."""
        lines = deferred_lines.c
        engine = await self._engine()
        last = -1
        while True:
            statement = (
                select(lines.seq, lines.state, lines.body, lines.result, lines.ok)
                .where(lines.job_id == job_id, lines.seq > last)
                .order_by(lines.seq)
                .limit(chunk)
            )
            async with engine.connect() as conn:
                rows = (await conn.execute(statement)).all()
            for seq, state, body, result, ok in rows:
                yield seq, state, body, result, bool(ok)
            if len(rows) < chunk:
                return
            last = rows[-1][0]


async def _bill_run(conn: AsyncConnection, job_id: str, seq: int, record: UsageRecord) -> None:
    """A run's usage row, its tokens added to its line's (what the batch reports)."""
    lines = deferred_lines.c
    await conn.execute(
        update(deferred_lines)
        .where(lines.job_id == job_id, lines.seq == seq)
        .values(
            prompt_tokens=lines.prompt_tokens + record.prompt_tokens,
            completion_tokens=lines.completion_tokens + record.completion_tokens,
        )
    )
    await _insert_usage(conn, record)


async def _insert_usage(conn: AsyncConnection, record: UsageRecord) -> None:
    """The row, once: a run billed already (its id is unique to it) is not billed again.
    Its cost is the price in force when the run started, read in the same transaction
    (a batch line's with the batch discount)."""
    if record.cost_micros is None:
        price = await price_in(conn, record.model, record.created_at)
        record.cost_micros = record_cost(price, record)
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = dialect_insert(usage).on_conflict_do_nothing(index_elements=["request_id"])
    await conn.execute(statement.values(**record_row(record)))
