"""The deferred-work store: jobs and lines in the tenant database.

Every change of a line is one conditional `UPDATE ... WHERE` (its state, and for a
running line its lease owner), which both SQLite and PostgreSQL apply atomically: two
replicas claiming at once get disjoint lines, a line whose lease ran out (its replica
died) can be claimed again, and a replica that lost its lease cannot answer the line.
An answer is the line's result, its state change and its usage row in one transaction:
after any crash a line is either answered and billed, or neither (and runs again)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import and_, delete, func, insert, or_, select, update

from app.db.deferred import deferred_jobs, deferred_lines
from app.deferred.lines import LineLeases
from app.deferred.records import (
    ANSWERED,
    CANCELLED,
    EXPIRED,
    INSERT_CHUNK,
    PENDING,
    RUNNING,
    UNFINISHED,
    Job,
    Line,
    LineCounts,
    held_by,
    insert_lines,
    job_of,
)

__all__ = [
    "ANSWERED",
    "CANCELLED",
    "EXPIRED",
    "INSERT_CHUNK",
    "PENDING",
    "RUNNING",
    "UNFINISHED",
    "DeferredStore",
    "Job",
    "Line",
    "LineCounts",
    "held_by",
    "insert_lines",
    "job_of",
]


DELETE_CHUNK = 2000  # lines a transaction deletes when a job's staged lines are cleared


class DeferredStore(LineLeases):
    """Jobs (create, stage, get, list, move, hold, active) here; their lines'
    leases in `LineLeases`."""

    async def create(self, job: Job, lines: Iterable[str]) -> Job:
        """The job and all its lines (pending), in one transaction."""
        now = self.clock()
        job.stamps.setdefault(job.state, now)
        values = {
            "id": job.id,
            "kind": job.kind,
            "owner": job.owner,
            "key_id": job.key_id,
            "state": job.state,
            "payload": json.dumps(job.payload),
            "result": json.dumps(job.result) if job.result is not None else None,
            "stamps": json.dumps(job.stamps),
            "created_at": job.created_at,
            "expires_at": job.expires_at,
            "updated_at": now,
        }
        engine = await self._engine()
        async with engine.begin() as conn:
            await conn.execute(insert(deferred_jobs).values(**values))
            await insert_lines(conn, job.id, lines)
        return job

    async def get(self, job_id: str, owner: str | None = None) -> Job | None:
        """The job; None when it does not exist or (with `owner`) is someone else's."""
        statement = select(deferred_jobs).where(deferred_jobs.c.id == job_id)
        if owner is not None:
            statement = statement.where(deferred_jobs.c.owner == owner)
        engine = await self._engine()
        async with engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return job_of(row) if row is not None else None

    async def list_jobs(
        self,
        kind: str,
        owner: str | None,
        *,
        after: str | None = None,
        limit: int = 20,
        states: tuple[str, ...] | None = None,
    ) -> list[Job]:
        """Newest first; `after`: the jobs created before that one (a page's last id)."""
        table = deferred_jobs
        statement = select(table).where(table.c.kind == kind)
        if owner is not None:
            statement = statement.where(table.c.owner == owner)
        if states is not None:
            statement = statement.where(table.c.state.in_(states))
        engine = await self._engine()
        async with engine.connect() as conn:
            if after is not None:
                # Only the owner's own job is a cursor: another's id reads as unknown.
                mine = select(table.c.created_at).where(table.c.id == after, table.c.kind == kind)
                if owner is not None:
                    mine = mine.where(table.c.owner == owner)
                cursor = (await conn.execute(mine)).first()
                if cursor is not None:
                    statement = statement.where(
                        or_(
                            table.c.created_at < cursor.created_at,
                            and_(table.c.created_at == cursor.created_at, table.c.id < after),
                        )
                    )
            statement = statement.order_by(table.c.created_at.desc(), table.c.id.desc())
            rows = (await conn.execute(statement.limit(limit))).all()
        return [job_of(row) for row in rows]

    async def move(
        self,
        job_id: str,
        from_states: tuple[str, ...],
        to: str,
        result: dict[str, Any] | None = None,
    ) -> bool:
        """Change the job's state (stamping the time it entered `to`) if it is in one of
        `from_states`; `result` replaces the kind's outcome when given."""
        job = await self.get(job_id)
        if job is None or job.state not in from_states:
            return False
        now = self.clock()
        stamps = {**job.stamps}
        stamps.setdefault(to, now)
        values: dict[str, Any] = {"state": to, "stamps": json.dumps(stamps), "updated_at": now}
        if result is not None:
            values["result"] = json.dumps(result)
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_jobs)
                .where(deferred_jobs.c.id == job_id, deferred_jobs.c.state == job.state)
                .values(**values)
            )
        return changed.rowcount == 1

    async def hold(self, job_id: str, replica: str, lease_s: float) -> bool:
        """Take the job's own lease (to finalize it): one replica at a time."""
        now = self.clock()
        table = deferred_jobs
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(table)
                .where(
                    table.c.id == job_id,
                    or_(
                        table.c.lease_owner.is_(None),
                        table.c.lease_owner == replica,
                        table.c.lease_until < now,
                    ),
                )
                .values(lease_owner=replica, lease_until=now + lease_s)
            )
        return changed.rowcount == 1

    async def count_jobs(self, kind: str, owner: str, states: tuple[str, ...]) -> int:
        """How many of `owner`'s jobs of `kind` are in `states`."""
        table = deferred_jobs
        statement = (
            select(func.count())
            .select_from(table)
            .where(table.c.kind == kind, table.c.owner == owner, table.c.state.in_(states))
        )
        engine = await self._engine()
        async with engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())

    async def active(self, kind: str, states: tuple[str, ...]) -> list[Job]:
        """Every job of `kind` in `states`, oldest first (what the runner works on)."""
        table = deferred_jobs
        statement = (
            select(table)
            .where(table.c.kind == kind, table.c.state.in_(states))
            .order_by(table.c.created_at, table.c.id)
        )
        engine = await self._engine()
        async with engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [job_of(row) for row in rows]

    # -- lines written while a job is validated, a bounded chunk a transaction

    async def stage(
        self,
        job_id: str,
        state: str,
        lease: tuple[str, float],
        first_seq: int,
        bodies: Sequence[str],
        to: str | None = None,
    ) -> bool:
        """Write `bodies` as the job's lines from `first_seq`, while the job is in `state`
        under the lease `(replica, seconds)`, which this extends; with `to`, the job moves
        there in the same transaction (the last chunk). False, nothing written, once the
        job left `state` or another replica took its lease. The job's state gates its
        lines: nothing claims, counts or closes a line of a job still `state`."""
        replica, lease_s = lease
        now = self.clock()
        table = deferred_jobs
        values: dict[str, Any] = {"lease_until": now + lease_s, "updated_at": now}
        if to is not None:
            job = await self.get(job_id)
            stamps = {**(job.stamps if job is not None else {})}
            stamps.setdefault(to, now)
            values.update(state=to, stamps=json.dumps(stamps))
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(table)
                .where(table.c.id == job_id, table.c.state == state, table.c.lease_owner == replica)
                .values(**values)
            )
            if changed.rowcount != 1:
                return False
            if bodies:
                rows = [
                    {"job_id": job_id, "seq": first_seq + i, "state": PENDING, "body": body}
                    for i, body in enumerate(bodies)
                ]
                await conn.execute(insert(deferred_lines), rows)
        return True

    async def clear_lines(self, job_id: str, per_step: int = DELETE_CHUNK) -> int:
        """Delete the job's lines (those a cut or failed validation staged, or those of
        a job purged), `per_step` a transaction, so no write lock is held long; how
        many."""
        lines = deferred_lines.c
        engine = await self._engine()
        deleted = 0
        while True:
            async with engine.begin() as conn:
                last = (
                    await conn.execute(
                        select(lines.seq)
                        .where(lines.job_id == job_id)
                        .order_by(lines.seq)
                        .offset(per_step - 1)
                        .limit(1)
                    )
                ).scalar_one_or_none()
                where = lines.job_id == job_id
                if last is not None:
                    where = and_(where, lines.seq <= last)
                deleted += int((await conn.execute(delete(deferred_lines).where(where))).rowcount)
            if last is None:
                return deleted
