"""The deferred store's records: line states, the job and line types, and the row
helpers the job queries and the line leases share."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.deferred import deferred_lines

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
# A line's `attempts` column holds two counts of its runs: RUN times the runs that were
# cut (no fault of the line: stopped for interactive work, a drain, a restart, no room),
# plus the runs that failed. A claim adds RUN (a run counts as cut unless it fails), and a
# failed run moves from the first count to the second (`LineLeases.failed`). The failures
# of a line never reach RUN (they are bounded far below it).
RUN = 16


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
    attempts: int  # as claimed for this run (see RUN): this run counted among the cut

    @property
    def failed_runs(self) -> int:
        """The line's earlier runs that failed (an engine error)."""
        return self.attempts % RUN

    @property
    def cut_runs(self) -> int:
        """The line's earlier runs that were cut."""
        return max(0, self.attempts // RUN - 1)


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


def held_by(job_id: str, seq: int, replica: str) -> Any:
    """The line `(job_id, seq)` while it runs under `replica`'s lease: what a renewal, a
    release and an answer may change, and nothing a replica that lost the lease holds."""
    lines = deferred_lines.c
    return and_(
        lines.job_id == job_id,
        lines.seq == seq,
        lines.state == RUNNING,
        lines.lease_owner == replica,
    )


async def insert_lines(conn: AsyncConnection, job_id: str, lines: Iterable[str]) -> None:
    chunk: list[dict[str, Any]] = []
    for seq, body in enumerate(lines):
        chunk.append({"job_id": job_id, "seq": seq, "state": PENDING, "body": body})
        if len(chunk) >= INSERT_CHUNK:
            await conn.execute(insert(deferred_lines), chunk)
            chunk = []
    if chunk:
        await conn.execute(insert(deferred_lines), chunk)


def job_of(row: Any) -> Job:
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
