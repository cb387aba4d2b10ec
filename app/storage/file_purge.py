"""Deleting expired files in bounded steps, so the purge never holds the database for
long (SQLite has one write lock for the whole file, which the usage writer needs too).

An expired file is already gone for readers (app.storage.files hides it from its
`expires_at` on); here its rows go: its chunks, at most `PURGE_CHUNKS` (about a MiB
each) a transaction, then the file rows, at most `PURGE_FILES` a transaction. A file
`keep` names (the input of a batch not yet ended) is left for a later round. `expire`
hides files at once, for the purge to delete (a batch's output and error files, when the
batch is purged).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from sqlalchemy import and_, delete, or_, select, update

from app.db.schema import file_chunks, files
from app.storage.database import TenantDatabase
from app.storage.files import PROCESSED

__all__ = ["PURGE_CHUNKS", "PURGE_FILES", "FilePurge"]

# File rows read and deleted a transaction.
PURGE_FILES = 500
# Chunk rows (about a MiB each) deleted a transaction.
PURGE_CHUNKS = 64


class FilePurge:
    def __init__(
        self,
        database: TenantDatabase,
        files_per_step: int = PURGE_FILES,
        chunks_per_step: int = PURGE_CHUNKS,
    ) -> None:
        self.database = database
        self.files_per_step = files_per_step
        self.chunks_per_step = chunks_per_step

    async def expire(self, file_ids: Collection[str], now: float) -> None:
        """Make the files expire at `now` (those that would expire later, or never)."""
        if not file_ids:
            return
        table = files.c
        engine = await self.database.engine()
        async with engine.begin() as conn:
            await conn.execute(
                update(files)
                .where(
                    table.id.in_(list(file_ids)),
                    or_(table.expires_at.is_(None), table.expires_at > now),
                )
                .values(expires_at=now)
            )

    async def purge_expired(self, now: float, keep: Collection[str] = ()) -> int:
        """Delete every file expired at `now` but those in `keep`; how many went."""
        engine = await self.database.engine()
        cursor, total = -1, 0
        while True:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        select(files.c.pk, files.c.id, files.c.chunks)
                        # An upload under way is left to the stale-upload cleanup.
                        .where(
                            files.c.expires_at <= now,
                            files.c.status == PROCESSED,
                            files.c.pk > cursor,
                        )
                        .order_by(files.c.pk)
                        .limit(self.files_per_step)
                    )
                ).all()
            if not rows:
                return total
            cursor = rows[-1].pk
            doomed = [(row.pk, int(row.chunks)) for row in rows if row.id not in keep]
            await self._delete(doomed)
            total += len(doomed)
            if len(rows) < self.files_per_step:
                return total

    async def _delete(self, doomed: list[tuple[int, int]]) -> None:
        """Delete the files (pk, chunks): their chunks a bounded step at a time, then
        their rows in one."""
        if not doomed:
            return
        engine = await self.database.engine()
        for step in chunk_steps(doomed, self.chunks_per_step):
            ranges = [
                and_(file_chunks.c.file_pk == pk, file_chunks.c.seq >= lo, file_chunks.c.seq < hi)
                for pk, lo, hi in step
            ]
            async with engine.begin() as conn:
                await conn.execute(delete(file_chunks).where(or_(*ranges)))
        async with engine.begin() as conn:
            # None is left unless a write outran its row's count: those go too.
            pks = [pk for pk, _ in doomed]
            await conn.execute(delete(file_chunks).where(file_chunks.c.file_pk.in_(pks)))
            await conn.execute(delete(files).where(files.c.pk.in_(pks)))


def chunk_steps(doomed: list[tuple[int, int]], budget: int) -> Iterator[list[tuple[int, int, int]]]:
    """The chunks of the files (pk, chunks) as ranges (pk, first seq, seq past the last),
    grouped so that each group spans at most `budget` chunks."""
    step: list[tuple[int, int, int]] = []
    room = budget
    for pk, count in doomed:
        start = 0
        while start < count:
            take = min(room, count - start)
            step.append((pk, start, start + take))
            start += take
            room -= take
            if room == 0:
                yield step
                step, room = [], budget
    if step:
        yield step
