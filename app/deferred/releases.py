"""Cut lines made pending again in batches: an interactive request arriving cuts every
running line at once, and one commit for all of them takes the event loop (which serves
that request) for far less than one commit each."""

from __future__ import annotations

import asyncio
import logging

from app.deferred.store import DeferredStore
from app.tenancy.usage.records import UsageRecord

log = logging.getLogger("lilac.deferred")


class CutReleases:
    """The lines one replica cut, released in one transaction per moment of cutting."""

    def __init__(self, store: DeferredStore, replica: str) -> None:
        self.store = store
        self.replica = replica
        self._counted: list[tuple[str, int]] = []  # cut after work began
        self._unrun: list[tuple[str, int]] = []  # refused before any work: claim undone
        self._records: dict[tuple[str, int], UsageRecord] = {}  # the cut runs' usage
        self._tasks: set[asyncio.Task[None]] = set()

    def add(
        self, job_id: str, seq: int, counted: bool = True, record: UsageRecord | None = None
    ) -> None:
        """Release the line with the others cut in this same moment, billing `record`
        (what its run did) in the same transaction. Not `counted`: it was refused before
        any work, and its claim is undone (`Line.cut_runs`)."""
        (self._counted if counted else self._unrun).append((job_id, seq))
        if record is not None:
            self._records[(job_id, seq)] = record
        if len(self._counted) + len(self._unrun) == 1:
            task = asyncio.get_running_loop().create_task(self._release())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Until the releases started so far are written (or have failed)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _release(self) -> None:
        await asyncio.sleep(0)  # the lines cut in this same moment unwind and join first
        counted, self._counted = self._counted, []
        unrun, self._unrun = self._unrun, []
        records, self._records = self._records, {}
        try:
            if counted:
                await self.store.release_many(counted, self.replica, records=records)
            if unrun:
                await self.store.release_many(unrun, self.replica, counted=False)
        except Exception:
            # The database failed: the lines stay claimed and run again after their lease;
            # the cut runs' usage goes with the transaction (a lost bill, logged).
            count = len(counted) + len(unrun)
            log.exception("deferred work: %d cut lines could not be released", count)
