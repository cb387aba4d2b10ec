"""The deferred-work store: jobs and lines in the tenant database.

Every change of a line is one conditional `UPDATE ... WHERE` (its state, and for a
running line its lease owner), which both SQLite and PostgreSQL apply atomically: two
replicas claiming at once get disjoint lines, a line whose lease ran out (its replica
died) can be claimed again, and a replica that lost its lease cannot answer the line.
An answer is the line's result, its state change and its usage row in one transaction:
after any crash a line is either answered and billed, or neither (and runs again)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.deferred.schema import deferred_jobs, deferred_lines
from app.storage.database import TenantDatabase
from app.tenancy.schema import usage
from app.tenancy.usage import UsageRecord

# Line states. `pending` and `running` are unfinished; the others are final.
PENDING, RUNNING, ANSWERED, EXPIRED, CANCELLED = (
    "pending",
    "running",
    "answered",
    "expired",
    "cancelled",
)
UNFINISHED = (PENDING, RUNNING)
INSERT_CHUNK = 500  # lines per INSERT statement when a job is created


@dataclass(slots=True)
class Job:
    id: str
    kind: str
    owner: str
    key_id: str | None
    state: str
    payload: dict[str, Any]
    result: dict[str, Any] | None
    stamps: dict[str, float]
    created_at: float
    expires_at: float | None


@dataclass(slots=True)
class Line:
    job_id: str
    seq: int
    body: str
    attempts: int


@dataclass(slots=True)
class LineCounts:
    by_state: dict[str, int] = field(default_factory=dict)
    ok: int = 0  # answered with a success
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def unfinished(self) -> int:
        return sum(self.by_state.get(state, 0) for state in UNFINISHED)


def _held(job_id: str, seq: int, replica: str) -> Any:
    """The line `(job_id, seq)` while it runs under `replica`'s lease: what a renewal, a
    release and an answer may change, and nothing a replica that lost the lease holds."""
    lines = deferred_lines.c
    return and_(
        lines.job_id == job_id,
        lines.seq == seq,
        lines.state == RUNNING,
        lines.lease_owner == replica,
    )


async def _insert_lines(conn: AsyncConnection, job_id: str, lines: Iterable[str]) -> None:
    chunk: list[dict[str, Any]] = []
    for seq, body in enumerate(lines):
        chunk.append({"job_id": job_id, "seq": seq, "state": PENDING, "body": body})
        if len(chunk) >= INSERT_CHUNK:
            await conn.execute(insert(deferred_lines), chunk)
            chunk = []
    if chunk:
        await conn.execute(insert(deferred_lines), chunk)


def _job(row: Any) -> Job:
    return Job(
        id=row.id,
        kind=row.kind,
        owner=row.owner,
        key_id=row.key_id,
        state=row.state,
        payload=json.loads(row.payload),
        result=json.loads(row.result) if row.result else None,
        stamps=json.loads(row.stamps or "{}"),
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


class DeferredStore:
    def __init__(self, database: TenantDatabase, clock: Callable[[], float] = time.time) -> None:
        self.database = database
        self.clock = clock

    async def _engine(self) -> AsyncEngine:
        return await self.database.engine()

    # ------------------------------------------------------------ jobs

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
            await _insert_lines(conn, job.id, lines)
        return job

    async def populate(self, job_id: str, from_state: str, to: str, lines: Iterable[str]) -> bool:
        """Write the lines of a job created without them (pending) and move it from
        `from_state` to `to`, in one transaction; False (nothing written) when the job
        was no longer in `from_state`."""
        job = await self.get(job_id)
        if job is None or job.state != from_state:
            return False
        now = self.clock()
        stamps = {**job.stamps}
        stamps.setdefault(to, now)
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_jobs)
                .where(deferred_jobs.c.id == job_id, deferred_jobs.c.state == from_state)
                .values(state=to, stamps=json.dumps(stamps), updated_at=now)
            )
            if changed.rowcount != 1:
                return False
            await _insert_lines(conn, job_id, lines)
        return True

    async def get(self, job_id: str, owner: str | None = None) -> Job | None:
        """The job; None when it does not exist or (with `owner`) is someone else's."""
        statement = select(deferred_jobs).where(deferred_jobs.c.id == job_id)
        if owner is not None:
            statement = statement.where(deferred_jobs.c.owner == owner)
        engine = await self._engine()
        async with engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _job(row) if row is not None else None

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
                cursor = (
                    await conn.execute(select(table.c.created_at).where(table.c.id == after))
                ).first()
                if cursor is not None:
                    statement = statement.where(
                        or_(
                            table.c.created_at < cursor.created_at,
                            and_(table.c.created_at == cursor.created_at, table.c.id < after),
                        )
                    )
            statement = statement.order_by(table.c.created_at.desc(), table.c.id.desc())
            rows = (await conn.execute(statement.limit(limit))).all()
        return [_job(row) for row in rows]

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
        return [_job(row) for row in rows]

    # ------------------------------------------------------------ lines

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
                        attempts=lines.attempts + 1,
                    )
                )
                if changed.rowcount == 1:
                    claimed.append(Line(job_id, seq, body, attempts + 1))
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
                    .where(_held(job_id, seq, replica))
                    .values(lease_until=until)
                )

    async def release(self, job_id: str, seq: int, replica: str) -> bool:
        """A line cut before its answer (a drain, a restart, capacity taken back): pending
        again, to run later; its attempt is not counted against it."""
        lines = deferred_lines.c
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(_held(job_id, seq, replica))
                .values(
                    state=PENDING,
                    lease_owner=None,
                    lease_until=None,
                    attempts=func.max(lines.attempts - 1, 0)
                    if engine.dialect.name == "sqlite"
                    else func.greatest(lines.attempts - 1, 0),
                )
            )
        return changed.rowcount == 1

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
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(_held(job_id, seq, replica))
                .values(
                    state=ANSWERED,
                    result=result,
                    ok=int(ok),
                    lease_owner=None,
                    lease_until=None,
                    finished_at=self.clock(),
                    prompt_tokens=record.prompt_tokens if record is not None else 0,
                    completion_tokens=record.completion_tokens if record is not None else 0,
                )
            )
            if changed.rowcount != 1:
                return False
            if record is not None:
                await conn.execute(insert(usage).values(**dataclasses.asdict(record)))
        return True

    async def close_pending(self, job_id: str, to: str) -> int:
        """End the job's pending lines (`expired`, `cancelled`); running ones go on."""
        lines = deferred_lines.c
        engine = await self._engine()
        async with engine.begin() as conn:
            changed = await conn.execute(
                update(deferred_lines)
                .where(lines.job_id == job_id, lines.state == PENDING)
                .values(state=to, finished_at=self.clock())
            )
        return int(changed.rowcount)

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
