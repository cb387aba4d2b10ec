"""The `batch` kind of deferred work: its lines run by `LineRunner`, and its life after
creation, looked after each tick by the runner (`tend`): validation of the input file
(app.services.batches.validation, in a task of its own so a large file does not hold up
the runner's ticks), expiry at the end of the completion window, cancellation, and
finalizing once every line is answered (the output and error files written, then the
final status).

A batch whose key was revoked (or deleted) ends at once, at the first tick that reads
the key from the database (every replica reads it each tick): it is `cancelled`, every
line not answered (pending, or running on any replica) is closed `cancelled`, and each
replica stops the lines it was running (app.deferred.runner)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from app.deferred.store import (
    ANSWERED,
    CANCELLED,
    EXPIRED,
    DeferredStore,
    Job,
    Line,
    LineCounts,
)
from app.deferred.work import (
    INTERRUPTED,
    INTERRUPTED_MESSAGE,
    Answer,
    Cut,
    RunBill,
    interrupted,
)
from app.errors import FileNotFound
from app.services.batches.lines import LineRunner, closed_line, line_model
from app.services.batches.validation import VALIDATE_LEASE_S, validate
from app.storage.files import FileObject
from app.tenancy.keys.store import KeyNotFound, KeyRecord, KeyStore

log = logging.getLogger("lilac.batches")

KIND = "batch"
OUTPUT_PURPOSE = "batch_output"
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed: the batch was cancelled."
FINALIZE_LEASE_S = 120.0
# The states in which a batch whose key was revoked is stopped (later ones have no line
# left to run).
STOPPABLE = ("validating", "in_progress", "cancelling")
# A tick waits this long for a validation before going on (a small file is validated,
# and its first lines started, in the tick that sees the batch).
VALIDATE_WAIT_S = 0.5
# Validations one replica runs at once (the others wait): each holds a chunk of lines and
# takes the tenant database's write lock a chunk at a time.
MAX_VALIDATIONS = 2


class Files(Protocol):
    """What batches need of the file store (`app.storage.files.FileStore`)."""

    async def get(self, owner: str, file_id: str) -> FileObject: ...

    def lines(self, owner: str, file_id: str) -> AsyncIterator[bytes]: ...

    async def create_from_lines(
        self,
        owner: str,
        purpose: str,
        filename: str,
        lines: AsyncIterator[bytes],
        file_id: str | None = None,
    ) -> FileObject: ...

    async def discard_partial(self, file_id: str) -> None: ...


class BatchJobs:
    """The runner's handler of `batch` jobs."""

    kind = KIND
    active_states: tuple[str, ...] = ("validating", "in_progress", "cancelling", "finalizing")
    runnable_states: tuple[str, ...] = ("in_progress",)

    def __init__(
        self,
        store: DeferredStore,
        files: Files,
        lines: LineRunner,
        keys: KeyStore | None,
        replica: str,
    ) -> None:
        self.store = store
        self.files = files
        self.lines = lines
        self.keys = keys
        self.replica = replica
        self._keys: dict[str, KeyRecord] = {}
        self._validating: dict[str, asyncio.Task[bool]] = {}

    async def run(self, job: Job, line: Line, bill: RunBill | None = None) -> Answer:
        if interrupted(line):  # cut too often: failed, in the error file, without a run
            result = closed_line(job.id, line.seq, line.body, INTERRUPTED, INTERRUPTED_MESSAGE)
            return Answer(result, False, None)
        return await self.lines.run(job, line, await self._live_key(job), bill)

    def line_model(self, job: Job, line: Line) -> str | None:
        """The model the line's body names (checked when the batch was made)."""
        return line_model(line.body)

    async def _key(self, job: Job) -> KeyRecord | None:
        """The batch's key as the database has it now (its models, priority, group)."""
        if job.key_id is None or self.keys is None:
            return None
        key = self._keys.get(job.key_id)
        if key is None:
            key = self._keys[job.key_id] = await self.keys.get(job.key_id)
        return key

    def forget_keys(self) -> None:
        """Read keys afresh (each tick of the jobs: a key's models may change)."""
        self._keys.clear()

    async def tend(self, job: Job, counts: LineCounts) -> None:
        self.forget_keys()
        if job.state in STOPPABLE and await self._revoked(job):
            counts = await self._stop(job)
        if job.state == "validating":
            await self._validate(job)
            return
        now = self.store.clock()
        if job.state == "in_progress" and job.expires_at is not None and now >= job.expires_at:
            await self.store.close_pending(job.id, EXPIRED)
            counts = (await self.store.counts([job.id]))[job.id]
        if job.state == "cancelling":
            await self._close_lines(job, CANCELLED)
            counts = (await self.store.counts([job.id]))[job.id]
        if counts.unfinished == 0 or job.state == "finalizing":
            await self.finalize(job, counts)

    async def _live_key(self, job: Job) -> KeyRecord | None:
        """The batch's key; `Cut` when it was revoked or deleted (the line runs nothing,
        and the next tick ends the batch)."""
        try:
            key = await self._key(job)
        except KeyNotFound:
            raise Cut("the batch's key was deleted") from None
        if key is not None and key.revoked:
            raise Cut("the batch's key was revoked")
        return key

    async def _revoked(self, job: Job) -> bool:
        """Whether the batch's key has been revoked or deleted, as the database has it."""
        try:
            await self._live_key(job)
        except Cut:
            return True
        return False

    async def _stop(self, job: Job) -> LineCounts:
        """End a revoked key's batch now: `cancelling` (so it ends `cancelled`), its
        validation stopped and every line not answered closed, wherever it runs. `job`
        takes its new state; the counts after."""
        task = self._validating.pop(job.id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.store.move(job.id, ("validating", "in_progress"), "cancelling")
        current = await self.store.get(job.id)
        if current is not None:
            job.state, job.stamps = current.state, current.stamps
        closed = await self._close_lines(job, CANCELLED, running=True)
        log.info("batch %s: its key was revoked; %d lines cancelled", job.id, closed)
        return (await self.store.counts([job.id]))[job.id]

    async def _close_lines(self, job: Job, to: str, running: bool = False) -> int:
        """End the job's lines not answered (`close_pending`). A batch that never left
        validation ran none: what its validation wrote is deleted instead."""
        if "in_progress" not in job.stamps:
            await self.store.clear_lines(job.id)
            return 0
        return await self.store.close_pending(job.id, to, running=running)

    async def _validate(self, job: Job) -> None:
        """Start (or keep waiting on) the job's validation; once it ends within the tick,
        `job` has its new state, so its lines start in this tick."""
        task = self._validating.get(job.id)
        if task is None:
            if len(self._validating) >= MAX_VALIDATIONS:
                return  # a later tick, once one of those has ended
            current = await self.store.get(job.id)
            if current is None or current.state != "validating":
                return  # a validation that ended since this tick's look moved it on
            if not await self.store.hold(job.id, self.replica, VALIDATE_LEASE_S):
                return  # another replica validates it
            task = asyncio.get_running_loop().create_task(self._validation(job))
            self._validating[job.id] = task
            # Its place is freed when it ends, seen or not: a validation longer than this
            # tick's wait moves its job on by itself, and no later tick tends the job as
            # validating again to free it.
            task.add_done_callback(functools.partial(self._validated, job.id))
        await asyncio.wait({task}, timeout=VALIDATE_WAIT_S)

    def _validated(self, job_id: str, task: asyncio.Task[bool]) -> None:
        if self._validating.get(job_id) is task:
            del self._validating[job_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("batch %s: validation failed", job_id, exc_info=task.exception())

    async def _validation(self, job: Job) -> bool:
        key = await self._key(job)
        lines = self.files.lines(job.owner, job.payload["input_file_id"])
        return await validate(self.store, job, lines, key, self.replica)

    async def close(self) -> None:
        """Stop the validations under way (another tick, or replica, does them again)."""
        tasks = list(self._validating.values())
        self._validating.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def finalize(self, job: Job, counts: LineCounts) -> None:
        """Write the output and error files, then the final status, holding the job's
        lease (one replica finalizes). A crash in between finalizes again on restart."""
        if not await self.store.hold(job.id, self.replica, FINALIZE_LEASE_S):
            return
        if job.state != "finalizing":
            if not await self.store.move(job.id, (job.state,), "finalizing"):
                return
            job = await self.store.get(job.id) or job
        result = dict(job.result or {})
        errors = sum(counts.by_state.get(s, 0) for s in (EXPIRED, CANCELLED)) + (
            counts.by_state.get(ANSWERED, 0) - counts.ok
        )
        if counts.ok:
            result["output_file_id"] = await self._result_file(job, "output", True)
        if errors:
            result["error_file_id"] = await self._result_file(job, "error", False)
        await self.store.move(job.id, ("finalizing",), final_status(job, counts), result)
        log.info("batch %s finalized: %d answered, %d errors", job.id, counts.ok, errors)

    async def _result_file(self, job: Job, name: str, successes: bool) -> str:
        """The id of the job's output (or error) file, written unless a finalizing cut
        short (a crash before the final status) wrote it whole already: its id is the
        job's, so finalizing again finds it, or discards what it left part-written."""
        file_id = result_file_id(job.id, name)
        try:
            await self.files.get(job.owner, file_id)
            return file_id
        except FileNotFound:
            await self.files.discard_partial(file_id)
        lines = self._lines(job, successes)
        filename = f"{job.id}_{name}.jsonl"
        file = await self.files.create_from_lines(
            job.owner, OUTPUT_PURPOSE, filename, lines, file_id=file_id
        )
        return str(file.id)

    async def _lines(self, job: Job, successes: bool) -> AsyncIterator[bytes]:
        async for seq, state, body, result, ok in self.store.finished_lines(job.id):
            if state == ANSWERED and ok == successes and result is not None:
                yield result.encode() + b"\n"
            elif not successes and state == EXPIRED:
                yield (
                    closed_line(job.id, seq, body, "batch_expired", EXPIRED_MESSAGE).encode()
                    + b"\n"
                )
            elif not successes and state == CANCELLED:
                line = closed_line(job.id, seq, body, "batch_cancelled", CANCELLED_MESSAGE)
                yield line.encode() + b"\n"


def result_file_id(job_id: str, name: str) -> str:
    """The id of a batch's `output` or `error` file: one per batch, whoever writes it."""
    return f"file-{job_id.removeprefix('batch_')}{name[:3]}"


def final_status(job: Job, counts: LineCounts) -> str:
    if "cancelling" in job.stamps:
        return "cancelled"
    if counts.by_state.get(EXPIRED, 0):
        return "expired"
    return "completed"
