"""What becomes of one run of a deferred line once it ends: answered (its result and
usage row in one transaction), or stopped before its answer and made pending again
(cut: released with the others cut in the same moment; failed: counted among its failed
runs), or no longer this replica's (closed meanwhile, or taken by another replica).
Every run the engine worked on is billed, once: the answer's usage row, or for a run
without one the usage its handler reported (`RunBill`), under the run's own id
(`run_id`)."""

from __future__ import annotations

import asyncio

import msgspec

from app.deferred.releases import CutReleases
from app.deferred.store import DeferredStore, Job, Line
from app.deferred.work import CUT_OUTCOME, Answer, Failed, NotRun, RunBill, RunnerStats, run_id
from app.tenancy.usage.records import UsageRecord


class RunSettlement:
    def __init__(self, store: DeferredStore, replica: str, stats: RunnerStats) -> None:
        self.store = store
        self.replica = replica
        self.stats = stats
        self.releases = CutReleases(store, replica)

    async def answered(self, job: Job, line: Line, answer: Answer) -> None:
        """The line's answer, if the line is still this replica's; else the run is
        billed alone (the engine did the work)."""
        commit = asyncio.ensure_future(
            self.store.answer(
                job.id, line.seq, self.replica, answer.result, answer.ok, answer.record
            )
        )
        try:
            kept = await asyncio.shield(commit)
        except asyncio.CancelledError:
            # Stopped meanwhile (the runner closing): the commit goes on, and what it
            # decided is counted before the stop goes on.
            if await _outcome(commit):
                self.stats.answered += 1
                self._count(answer.record)
            raise
        if kept:
            self.stats.answered += 1
            self._count(answer.record)
            return
        self.stats.lost += 1
        if answer.record is not None:
            record = msgspec.structs.replace(
                answer.record, request_id=run_id(answer.record.request_id, line)
            )
            await asyncio.shield(self.store.bill_run(job.id, line.seq, record))
            self._count(record)

    async def stopped(
        self, job: Job, line: Line, stopped: BaseException, bill: RunBill, taken: bool
    ) -> None:
        """A run that ended without the line's answer: the line pending again (or, when
        `taken`, no longer ours), and what the run did billed under its own id."""
        if isinstance(stopped, NotRun):  # refused before the engine took it
            record = None
        else:
            record = bill.record(line, "error" if isinstance(stopped, Failed) else CUT_OUTCOME)
        self._count(record)
        if taken:
            self.stats.lost += 1  # not ours to release
            if record is not None:
                await asyncio.shield(self.store.bill_run(job.id, line.seq, record))
        elif isinstance(stopped, Failed):
            self.stats.failed += 1
            await asyncio.shield(self.store.failed(job.id, line.seq, self.replica, record))
        else:
            self.stats.cut += 1
            counted = not isinstance(stopped, NotRun)
            self.releases.add(job.id, line.seq, counted=counted, record=record)

    def never_ran(self, job: Job, line: Line, taken: bool) -> None:
        """A line cut before its task took its first step: released (unless `taken`),
        or it would wait for its lease to run out."""
        if taken:
            self.stats.lost += 1
            return
        self.stats.cut += 1
        self.releases.add(job.id, line.seq)

    async def wait(self) -> None:
        """Until the releases started so far are written."""
        await self.releases.wait()

    def _count(self, record: UsageRecord | None) -> None:
        if record is not None:
            self.stats.prompt_tokens += record.prompt_tokens
            self.stats.completion_tokens += record.completion_tokens


async def _outcome(commit: asyncio.Future[bool]) -> bool:
    """Whether `commit` kept the answer, once it has ended (False if it failed)."""
    try:
        return await asyncio.shield(commit)
    except Exception:
        return False
