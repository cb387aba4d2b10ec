"""Stored responses: tenant data in the tenant database, scoped to their owner, kept for
the retention period, read back whole or as the chain a continuation carries.

Every read names its owner and filters out expired rows, so another owner's response,
an expired one and an unknown id are the same `ResponseNotFound`. A chain is two
indexed queries whatever its length: each row holds its depth, its ancestors' ids and
the bytes of their items, so a chain over its bounds is refused (`ChainTooLong`) from
the newest row alone, before any body is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import DatabaseError
from app.db.responses import OWNER_CHARS, RESPONSE_ID_CHARS, stored_responses
from app.errors import ChainTooLong, DatabaseUnavailable, ResponseNotFound, StoredTooLarge
from app.storage.database import TenantDatabase
from app.storage.response_records import (
    DAY_S,
    ResponseLimits,
    StoredResponse,
    delete_kept_with,
    stored_response,
)

__all__ = [
    "DAY_S",
    "ChainTooLong",
    "DatabaseUnavailable",
    "ResponseLimits",
    "ResponseNotFound",
    "ResponseStore",
    "StoredResponse",
    "StoredTooLarge",
]

log = logging.getLogger("lilac.storage")

# Expired rows are deleted this many at a time, so the purge never holds the database's
# write lock for long (SQLite has one for the whole file).
PURGE_BATCH = 500

_table = stored_responses
T = TypeVar("T")
_ids = msgspec.json.Decoder(list[str])


class ResponseStore:
    """Stored responses of every owner, in the tenant database (opened on first use)."""

    def __init__(
        self,
        database: TenantDatabase,
        limits: ResponseLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = database
        self.limits = limits or ResponseLimits()
        self._clock = clock

    def _cutoff(self, now: float | None = None) -> float:
        """Rows created before this are expired."""
        return (self._clock() if now is None else now) - self.limits.retention_s

    def _mine(self, owner: str, response_id: str) -> Any:
        """The row of `response_id` if it is `owner`'s and not expired."""
        return (
            (_table.c.id == response_id)
            & (_table.c.owner == owner)
            & (_table.c.created_at >= self._cutoff())
        )

    async def save(self, stored: StoredResponse) -> None:
        """Store a new response; raises `StoredTooLarge`, and for a continuation
        `ResponseNotFound` (its previous response is not the owner's to continue) or
        `ChainTooLong`."""
        await self._guarded(lambda: self._save(stored))

    async def update(
        self, owner: str, response_id: str, status: str, response: bytes, output_items: bytes
    ) -> None:
        """A stored response's new status, body and output (a background response as it
        runs); raises `ResponseNotFound` or `StoredTooLarge`."""
        await self._guarded(
            lambda: self._update(owner, response_id, status, response, output_items)
        )

    async def get(self, owner: str, response_id: str) -> StoredResponse:
        """The owner's response; `ResponseNotFound` if unknown, another's or expired."""
        return await self._guarded(lambda: self._get(owner, response_id))

    async def status(self, owner: str, response_id: str) -> str | None:
        """The owner's response's status alone (None: not found), cheap to poll."""
        return await self._guarded(lambda: self._status(owner, response_id))

    async def chain(self, owner: str, response_id: str) -> list[StoredResponse]:
        """The responses a continuation of `response_id` carries, oldest first, ending
        with `response_id`. `ChainTooLong` when that continuation would hold more than
        `max_chain` responses or the chain's items exceed `max_chain_bytes`;
        `ResponseNotFound` when any of them is not the owner's to read (unknown,
        another's, expired or deleted), naming the first missing one."""
        return await self._guarded(lambda: self._chain(owner, response_id))

    async def context(self, owner: str, response_id: str) -> list[StoredResponse]:
        """The owner's response and the responses it continued, oldest first, ending
        with it: the context its request saw. `ResponseNotFound` as `get`; a response of
        the chain deleted or expired since is left out (its items are gone)."""
        return await self._guarded(lambda: self._context(owner, response_id))

    async def delete(self, owner: str, response_id: str) -> None:
        """Delete the owner's response; `ResponseNotFound` as `get`. Responses that
        continue it stay, but can no longer be continued (their chain misses it)."""
        await self._guarded(lambda: self._delete(owner, response_id))

    async def stored_bytes(self, owner: str) -> int:
        """The bytes the owner's responses not yet expired hold (each one's body and its
        input and output items), for the stored-bytes quota: one indexed sum (`length`
        of a binary column reads its size, not its content, on both backends)."""
        return await self._guarded(lambda: self._stored_bytes(owner))

    async def _stored_bytes(self, owner: str) -> int:
        if not self.database.exists():
            return 0  # a read does not create the database
        size = func.coalesce(func.sum(_table.c.items_bytes + func.length(_table.c.response)), 0)
        statement = select(size).where(
            _table.c.owner == owner, _table.c.created_at >= self._cutoff()
        )
        engine = await self.database.engine()
        async with engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())

    async def _guarded(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work` against the database: once more on a pooled connection that died with a
        database since restarted (the pool is emptied by then); `DatabaseUnavailable`
        (503) when the database cannot be opened or reached."""
        try:
            try:
                return await work()
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                return await work()
        except (DatabaseError, OperationalError, InterfaceError, OSError, TimeoutError) as exc:
            log.warning("stored responses: the database is unavailable: %s", exc)
            raise DatabaseUnavailable() from exc

    async def _save(self, stored: StoredResponse) -> None:
        if len(stored.id) > RESPONSE_ID_CHARS or len(stored.owner) > OWNER_CHARS:
            raise ValueError("response ids and owners are bounded by the table's columns")
        size = len(stored.response) + len(stored.input_items) + len(stored.output_items)
        if size > self.limits.max_stored_bytes:
            raise StoredTooLarge(size, self.limits.max_stored_bytes)
        items_bytes = len(stored.input_items) + len(stored.output_items)
        engine = await self.database.engine()
        async with engine.begin() as conn:
            depth, ancestors, ancestor_bytes = 0, list[str](), 0
            if stored.previous_response_id is not None:
                previous = await self._head(conn, stored.owner, stored.previous_response_id)
                depth = previous.depth + 1
                ancestors = [*_ids.decode(previous.ancestors), stored.previous_response_id]
                ancestor_bytes = previous.ancestor_bytes + previous.items_bytes
                self.limits.check_chain(stored.previous_response_id, depth + 1)
                self.limits.check_chain_bytes(stored.id, ancestor_bytes + items_bytes)
            await conn.execute(
                insert(_table).values(
                    id=stored.id,
                    owner=stored.owner,
                    model=stored.model,
                    created_at=stored.created_at,
                    previous_response_id=stored.previous_response_id,
                    status=stored.status,
                    depth=depth,
                    ancestors=msgspec.json.encode(ancestors).decode(),
                    ancestor_bytes=ancestor_bytes,
                    items_bytes=items_bytes,
                    response=stored.response,
                    input_items=stored.input_items,
                    output_items=stored.output_items,
                )
            )

    async def _update(
        self, owner: str, response_id: str, status: str, response: bytes, output_items: bytes
    ) -> None:
        engine = await self._readable(response_id)
        async with engine.begin() as conn:
            found = await conn.execute(
                select(func.length(_table.c.input_items)).where(self._mine(owner, response_id))
            )
            input_bytes = found.scalar()
            if input_bytes is None:
                raise ResponseNotFound(response_id)
            size = len(response) + input_bytes + len(output_items)
            if size > self.limits.max_stored_bytes:
                raise StoredTooLarge(size, self.limits.max_stored_bytes)
            await conn.execute(
                update(_table)
                .where(self._mine(owner, response_id))
                .values(
                    status=status,
                    response=response,
                    output_items=output_items,
                    items_bytes=input_bytes + len(output_items),
                )
            )

    async def _get(self, owner: str, response_id: str) -> StoredResponse:
        if len(response_id) > RESPONSE_ID_CHARS:
            raise ResponseNotFound(response_id)
        engine = await self._readable(response_id)
        async with engine.connect() as conn:
            row = (await conn.execute(select(_table).where(self._mine(owner, response_id)))).first()
        if row is None:
            raise ResponseNotFound(response_id)
        return stored_response(row)

    async def _status(self, owner: str, response_id: str) -> str | None:
        if len(response_id) > RESPONSE_ID_CHARS or not self.database.exists():
            return None
        engine = await self.database.engine()
        async with engine.connect() as conn:
            found = await conn.execute(
                select(_table.c.status).where(self._mine(owner, response_id))
            )
            return found.scalar()

    async def _chain(self, owner: str, response_id: str) -> list[StoredResponse]:
        engine = await self._readable(response_id, "previous_response_id")
        async with engine.connect() as conn:
            head = await self._head(conn, owner, response_id)
            self.limits.check_chain(response_id, head.depth + 2)
            self.limits.check_chain_bytes(response_id, head.ancestor_bytes + head.items_bytes)
            ids = [*_ids.decode(head.ancestors), response_id]
            rows = await conn.execute(
                select(_table).where(
                    _table.c.id.in_(ids)
                    & (_table.c.owner == owner)
                    & (_table.c.created_at >= self._cutoff())
                )
            )
            found = {row.id: stored_response(row) for row in rows}
        for an_id in ids:
            if an_id not in found:
                raise ResponseNotFound(an_id, param="previous_response_id")
        return [found[an_id] for an_id in ids]

    async def _context(self, owner: str, response_id: str) -> list[StoredResponse]:
        if len(response_id) > RESPONSE_ID_CHARS:
            raise ResponseNotFound(response_id)
        engine = await self._readable(response_id)
        async with engine.connect() as conn:
            head = await conn.execute(
                select(_table.c.ancestors).where(self._mine(owner, response_id))
            )
            ancestors = head.scalar()
            if ancestors is None:
                raise ResponseNotFound(response_id)
            ids = [*_ids.decode(ancestors), response_id]
            rows = await conn.execute(
                select(_table).where(
                    _table.c.id.in_(ids)
                    & (_table.c.owner == owner)
                    & (_table.c.created_at >= self._cutoff())
                )
            )
            found = {row.id: stored_response(row) for row in rows}
        if response_id not in found:  # deleted between the two reads
            raise ResponseNotFound(response_id)
        return [found[an_id] for an_id in ids if an_id in found]

    async def _delete(self, owner: str, response_id: str) -> None:
        if len(response_id) > RESPONSE_ID_CHARS:
            raise ResponseNotFound(response_id)
        engine = await self._readable(response_id)
        async with engine.begin() as conn:
            result = await conn.execute(delete(_table).where(self._mine(owner, response_id)))
            if result.rowcount == 0:
                raise ResponseNotFound(response_id)
            await delete_kept_with(conn, [response_id])

    async def purge_expired(self, now: float) -> int:
        """Delete every response past the retention period at `now`; how many went."""
        cutoff = self._cutoff(now)
        expired = select(_table.c.id).where(_table.c.created_at < cutoff).limit(PURGE_BATCH)
        engine = await self.database.engine()
        total = 0
        while True:
            async with engine.begin() as conn:
                ids = list((await conn.execute(expired)).scalars())
                if ids:
                    await delete_kept_with(conn, ids)
                    await conn.execute(delete(_table).where(_table.c.id.in_(ids)))
            total += len(ids)
            if len(ids) < PURGE_BATCH:
                return total

    async def _readable(self, response_id: str, param: str | None = None) -> AsyncEngine:
        """The database, to read what it holds: where none was made yet it holds nothing,
        and a read does not create it."""
        if not self.database.exists():
            raise ResponseNotFound(response_id, param=param)
        return await self.database.engine()

    async def _head(self, conn: AsyncConnection, owner: str, response_id: str) -> Any:
        """The chain columns of the owner's response (no bodies), or `ResponseNotFound`."""
        if len(response_id) > RESPONSE_ID_CHARS:
            raise ResponseNotFound(response_id, param="previous_response_id")
        columns = select(
            _table.c.depth, _table.c.ancestors, _table.c.ancestor_bytes, _table.c.items_bytes
        )
        row = (await conn.execute(columns.where(self._mine(owner, response_id)))).first()
        if row is None:
            raise ResponseNotFound(response_id, param="previous_response_id")
        return row
