"""Files, stored in the tenant database: what `/v1/files` uploads and serves, and what
batches read their input from and write their output and error files to.

Content lives in the database in chunks of `CHUNK_BYTES`, not on one machine's disk, so
every replica sharing PostgreSQL reads the same files. A file is written in short
transactions, one per chunk, while its row says `uploading` (a large file must not hold
SQLite's single write lock for long, which would stall usage writes); a last one marks
it `processed` and only then can it be seen. A write that fails removes what it wrote; one
cut by a crash is removed by a later write once `STALE_UPLOAD_S` have passed.

Reads go a chunk at a time (`lines`, `content`): a file is never whole in memory. Every
read names its owner: another owner's file is `FileNotFound`, as an unknown one is, and
so is a file past its `expires_at`, from that second on (its rows are deleted later, in
bounded steps: app.storage.file_purge). Only `lines`, what a batch reads its input
with, still reads an expired file the purge has kept for a batch not yet ended.

An upload under a quota (app.tenancy.quotas) reserves its bytes in the row it starts
with, and checks the owner's bytes in the same transaction, after taking the write lock
(SQLite: the insert takes the file's one write lock; PostgreSQL: a transaction lock per
owner): concurrent uploads of one owner are checked one after the other, each seeing
the others' reservations, so together they never pass the quota.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import DatabaseError
from app.db.schema import FILENAME_CHARS, file_chunks, files
from app.errors import FileNotFound, StorageUnavailable
from app.storage.database import TenantDatabase
from app.storage.file_chunks import write_regrouped
from app.storage.file_rows import (
    PROCESSED,
    UPLOADING,
    FileObject,
    file_object,
    held_bytes,
    live,
    new_file_id,
)
from app.storage.lines import LineSplitter

__all__ = [
    "CHUNK_BYTES",
    "PROCESSED",
    "FileNotFound",
    "FileObject",
    "FileStore",
    "new_file_id",
]

log = logging.getLogger("lilac.files")

CHUNK_BYTES = 1024 * 1024
# An `uploading` file older than this was cut by a crash: the next write removes it.
STALE_UPLOAD_S = 24 * 3600.0


class FileStore:
    """Files per owner in the tenant database; injected into routes as `file_store`."""

    def __init__(
        self,
        database: TenantDatabase,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        clock: Callable[[], float] = time.time,
        retention_s: float = 0.0,
    ) -> None:
        """`retention_s`: how long a file is kept when its creator names no expiry (0:
        until deleted)."""
        self.database = database
        self.chunk_bytes = chunk_bytes
        self._clock = clock
        self.retention_s = retention_s

    async def create(
        self,
        owner: str,
        purpose: str,
        filename: str,
        content: bytes,
        *,
        line_count: int | None = None,
        expires_after_s: float | None = None,
        size: int = 0,
        quota: Callable[[int], None] | None = None,
    ) -> FileObject:
        """A file of `content`; `line_count` when the caller counted them already; the
        rest as `create_from_chunks`."""

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(content), self.chunk_bytes):
                yield content[start : start + self.chunk_bytes]

        return await self.create_from_chunks(
            owner,
            purpose,
            filename,
            pieces(),
            line_count=line_count,
            expires_after_s=expires_after_s,
            size=size,
            quota=quota,
        )

    async def create_from_lines(
        self,
        owner: str,
        purpose: str,
        filename: str,
        lines: AsyncIterable[bytes],
        file_id: str | None = None,
    ) -> FileObject:
        """A file of `lines`, each written followed by a newline (one is added where
        the line lacks it), streamed to the database a chunk at a time. `file_id`: the
        id to give it (a writer that may write the same file again after a crash, and
        must find it), else a new one."""

        async def terminated() -> AsyncIterator[bytes]:
            async for line in lines:
                yield line if line.endswith(b"\n") else line + b"\n"

        return await self.create_from_chunks(
            owner, purpose, filename, terminated(), file_id=file_id
        )

    async def discard_partial(self, file_id: str) -> None:
        """Remove the file `file_id` if a crash left it part-written (still uploading)."""
        async with self._connection() as conn:
            pks = list(
                (
                    await conn.execute(
                        select(files.c.pk).where(files.c.id == file_id, files.c.status == UPLOADING)
                    )
                ).scalars()
            )
        for pk in pks:
            await self._remove(pk)

    async def create_from_chunks(
        self,
        owner: str,
        purpose: str,
        filename: str,
        chunks: AsyncIterable[bytes],
        *,
        line_count: int | None = None,
        file_id: str | None = None,
        expires_after_s: float | None = None,
        size: int = 0,
        quota: Callable[[int], None] | None = None,
    ) -> FileObject:
        """A file whose content is `chunks` joined (of any sizes: they are regrouped
        into chunks of `chunk_bytes`), expiring `expires_after_s` after its creation (None:
        the store's retention). `size`: the bytes to reserve (the content's, when known
        before it is written); `quota`: called with the bytes of the owner's other files,
        reservations included, before any content is written (it raises to refuse)."""
        now = self._clock()
        await self._remove_stale(now)
        file_id = file_id or new_file_id()
        name = filename[:FILENAME_CHARS]
        expires_at = self._expires_at(now, expires_after_s)
        row = {
            "id": file_id,
            "owner": owner,
            "purpose": purpose,
            "filename": name,
            "bytes": size,
            "line_count": 0,
            "chunks": 0,
            "status": UPLOADING,
            "created_at": now,
            "expires_at": expires_at,
        }
        pk = await self._reserve(row, now, quota)
        try:
            size, counted, chunk_count = await self._write_chunks(pk, chunks)
            async with self._connection(write=True) as conn:
                await conn.execute(
                    update(files)
                    .where(files.c.pk == pk)
                    .values(
                        bytes=size,
                        chunks=chunk_count,
                        line_count=counted if line_count is None else line_count,
                        status=PROCESSED,
                    )
                )
        except BaseException:
            await self._remove(pk)
            raise
        return FileObject(
            id=file_id,
            bytes=size,
            created_at=int(now),
            filename=name,
            purpose=purpose,
            line_count=counted if line_count is None else line_count,
            expires_at=None if expires_at is None else int(expires_at),
        )

    def _expires_at(self, now: float, expires_after_s: float | None) -> float | None:
        ttl = self.retention_s if expires_after_s is None else expires_after_s
        return now + ttl if ttl > 0 else None

    async def _reserve(
        self, row: dict[str, object], now: float, quota: Callable[[int], None] | None
    ) -> int:
        """Insert the `uploading` row; with a `quota`, check it in the same transaction
        (see the module's docstring for why that is race-safe). The row's primary key."""
        async with self._connection(write=True) as conn:
            if quota is not None and conn.dialect.name == "postgresql":
                lock = func.pg_advisory_xact_lock(func.hashtext("lilac-files:" + str(row["owner"])))
                await conn.execute(select(lock))
            result = await conn.execute(insert(files).values(**row))
            inserted = result.inserted_primary_key
            assert inserted is not None  # an insert of one row has its key
            pk = int(inserted[0])
            if quota is not None:
                held = held_bytes(str(row["owner"]), now, but=pk)
                quota(int((await conn.execute(held)).scalar_one()))  # raising rolls back
        return pk

    async def held_bytes(self, owner: str) -> int:
        """The bytes of `owner`'s files not expired, uploads under way included."""
        async with self._connection() as conn:
            return int((await conn.execute(held_bytes(owner, self._clock()))).scalar_one())

    async def _write_chunks(self, pk: int, chunks: AsyncIterable[bytes]) -> tuple[int, int, int]:
        async def write(seq: int, data: bytes) -> None:
            async with self._connection(write=True) as conn:
                await conn.execute(insert(file_chunks).values(file_pk=pk, seq=seq, data=data))

        return await write_regrouped(chunks, self.chunk_bytes, write)

    @contextlib.asynccontextmanager
    async def _connection(self, *, write: bool = False) -> AsyncIterator[AsyncConnection]:
        """A connection (`write`: in a transaction, committed at the end); a database
        that cannot be reached or opened is `StorageUnavailable` (503), not a 500."""
        try:
            engine = await self.database.engine()
            async with engine.begin() if write else engine.connect() as conn:
                yield conn
        except (SQLAlchemyError, OSError, DatabaseError) as exc:
            log.warning("file store: the database is unavailable: %s", exc)
            raise StorageUnavailable() from exc

    async def get(self, owner: str, file_id: str) -> FileObject:
        """The file, if `owner`'s, whole and not expired; else `FileNotFound`."""
        row = await self._row(owner, file_id)
        return file_object(row)

    async def _row(
        self, owner: str, file_id: str, *, expired_too: bool = False
    ) -> Row[tuple[object, ...]]:
        conditions = [files.c.id == file_id, files.c.owner == owner, files.c.status == PROCESSED]
        if not expired_too:
            conditions.append(live(self._clock()))
        async with self._connection() as conn:
            row = (await conn.execute(select(files).where(*conditions))).first()
        if row is None:
            raise FileNotFound(file_id)
        return row

    async def content(
        self, owner: str, file_id: str, *, expired_too: bool = False
    ) -> AsyncIterator[bytes]:
        """The raw content, a stored chunk at a time (each read on its own, so a large
        file is never whole in memory nor a long read transaction); `expired_too`: also
        of a file past its expiry that is not yet purged."""
        row = await self._row(owner, file_id, expired_too=expired_too)
        pk, count = row._mapping["pk"], int(row._mapping["chunks"])
        for seq in range(count):
            async with self._connection() as conn:
                data = (
                    await conn.execute(
                        select(file_chunks.c.data).where(
                            file_chunks.c.file_pk == pk, file_chunks.c.seq == seq
                        )
                    )
                ).scalar_one_or_none()
            if data is None:  # deleted while being read
                raise FileNotFound(file_id)
            yield bytes(data)

    async def lines(self, owner: str, file_id: str) -> AsyncIterator[bytes]:
        """The non-blank lines, without their line endings, streamed (as many as the
        file's `line_count`). A batch reads its input with this: a file that expired
        while a batch uses it is kept for it (app.storage.file_purge), and read."""
        splitter = LineSplitter()
        async for chunk in self.content(owner, file_id, expired_too=True):
            for _, line in splitter.feed(chunk):
                yield line
        last = splitter.finish()
        if last is not None:
            yield last[1]

    async def list(
        self, owner: str, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[FileObject]:
        """`owner`'s files, newest first (`order` "desc") or oldest first ("asc"), after
        the file `after` in that order (`FileNotFound` with param `after` for an id
        that is not the owner's), at most `limit`."""
        conditions = [files.c.owner == owner, files.c.status == PROCESSED, live(self._clock())]
        if purpose is not None:
            conditions.append(files.c.purpose == purpose)
        descending = order != "asc"
        async with self._connection() as conn:
            if after is not None:
                cursor = (
                    await conn.execute(
                        select(files.c.pk).where(files.c.id == after, files.c.owner == owner)
                    )
                ).scalar_one_or_none()
                if cursor is None:
                    raise FileNotFound(after, param="after")
                conditions.append(files.c.pk < cursor if descending else files.c.pk > cursor)
            statement = (
                select(files)
                .where(and_(*conditions))
                .order_by(files.c.pk.desc() if descending else files.c.pk.asc())
                .limit(limit)
            )
            rows = (await conn.execute(statement)).all()
        return [file_object(row) for row in rows]

    async def delete(self, owner: str, file_id: str) -> None:
        """Remove `owner`'s file and its content; `FileNotFound` if there is none."""
        row = await self._row(owner, file_id)
        await self._remove(row._mapping["pk"])

    async def _remove(self, pk: int) -> None:
        async with self._connection(write=True) as conn:
            await conn.execute(delete(file_chunks).where(file_chunks.c.file_pk == pk))
            await conn.execute(delete(files).where(files.c.pk == pk))

    async def _remove_stale(self, now: float) -> None:
        """Remove files a crash left `uploading` for longer than `STALE_UPLOAD_S`."""
        async with self._connection() as conn:
            stale = (
                await conn.execute(
                    select(files.c.pk).where(
                        files.c.status == UPLOADING, files.c.created_at < now - STALE_UPLOAD_S
                    )
                )
            ).scalars()
            pks = list(stale)
        for pk in pks:
            await self._remove(pk)
