"""The types and protocols the deferred-work runner works with: `Cut` (a line that cannot
run to its answer now and goes back to pending) and `Failed` (one whose run failed), with
the bounds on both (`run_again`, `interrupted`), `Answer` (a line's result and usage row),
`Handler` (what a kind of job does with its lines and itself), `Capacity` (what admission
tells the runner about room for deferred work and interactive load), `Running` (a line the
runner has started) and `RunnerStats` (its counters). They live apart from the runner
(`app.deferred.runner`) so that handlers can name them without importing it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from app.deferred.store import Job, Line, LineCounts
from app.errors import APIError
from app.tenancy.usage.records import UsageRecord

# A line is tried again after an engine failure until it has failed this many times,
# and after a cut until it has been cut this many times (a cut is no fault of the line,
# so its bound is the larger; a line that never runs to its end still stops).
MAX_FAILED_RUNS = 3
MAX_CUT_RUNS = 50
# The codes of a 5xx that is an engine failure (any other 5xx: no capacity, a drain).
ENGINE_FAILURES = ("engine_error", "internal_error")
INTERRUPTED = "request_interrupted"
INTERRUPTED_MESSAGE = (
    f"This request was stopped {MAX_CUT_RUNS} times before its end, to make room for "
    "interactive work or because the server stopped, and was not run again."
)


# The usage outcome of a run cut before the line's answer (it runs again, or ends).
CUT_OUTCOME = "cut"


class Cut(Exception):
    """The line could not run to its answer now (no capacity, a drain, the engine not
    ready): it goes back to pending and runs later, the run counted among its cut ones."""


class Failed(Cut):
    """The line's run failed inside the engine and it has tries left: it goes back to
    pending, the run counted among its failed ones."""


class NotRun(Cut):
    """The line was refused before the engine took it (no capacity, a drain, the engine
    not ready): pending again, and the run not counted among its cut ones, since no work
    was done (a restarting engine refuses every line for as long as it loads)."""


class KeyAtLimits(NotRun):
    """The line's key has its deferred work at its limits (tokens a minute, concurrency:
    app.tenancy.deferred_limits): not run now, and the key's lines wait
    `retry_after_s` before the runner starts another."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def run_again(error: APIError, line: Line) -> Cut | None:
    """What becomes of a line whose run ended in `error`: `NotRun` for a 5xx that is no
    engine failure (the server refused it), `Failed` for an engine failure while the
    line may fail again, None when the error is the line's answer (a request error, or
    the last failure)."""
    if error.status_code < 500:
        return None
    if error.code not in ENGINE_FAILURES:
        return NotRun(error.message)
    if line.failed_runs + 1 < MAX_FAILED_RUNS:
        return Failed(error.message)
    return None


def interrupted(line: Line) -> bool:
    """Whether the line has been cut too often to run again: it is answered with
    `INTERRUPTED` instead."""
    return line.cut_runs >= MAX_CUT_RUNS


@dataclass(slots=True)
class Answer:
    result: str  # the line's answer, a JSON line
    ok: bool
    record: UsageRecord | None  # its usage row (None: unmetered)


@dataclass(slots=True)
class RunBill:
    """The usage of one run of a line so far, for a run that ends without answering the
    line (cut, failed, or its answer refused: the line was no longer this replica's).
    The handler points `usage` at its meter as soon as the run has one; the runner
    bills what it gives under the run's own id (`run_id`), so every run the engine
    worked on is billed, once."""

    usage: Callable[[str], UsageRecord | None] | None = None  # outcome -> usage row

    def record(self, line: Line, outcome: str) -> UsageRecord | None:
        record = self.usage(outcome) if self.usage is not None else None
        if record is None:
            return None
        return msgspec.structs.replace(record, request_id=run_id(record.request_id, line))


def run_id(request_id: str, line: Line) -> str:
    """The usage id of one run of a line that did not answer it: the line's own id and
    its claim count (`Line.attempts`), which no other run of the line, on any replica,
    has."""
    return f"{request_id}~{line.attempts}"


class Handler(Protocol):
    """What a kind of job does with its lines and, once all are answered, with itself."""

    kind: str
    active_states: tuple[str, ...]  # the job states the runner looks after
    runnable_states: tuple[str, ...]  # of those, the ones whose lines may start

    async def run(self, job: Job, line: Line, bill: RunBill | None = None) -> Answer: ...

    async def tend(self, job: Job, counts: LineCounts) -> None:
        """Expire, cancel or finalize the job as its state and lines say."""

    # Optional: `line_model(job, line) -> str | None`, the model a line names (None:
    # not known), so that only interactive requests for that model cut it.


class Capacity(Protocol):
    def admitting(self) -> bool: ...

    def deferred_room(self) -> int: ...

    def deferred_running(self) -> int: ...

    def deferred_prefilling(self) -> int: ...

    def interactive_running(self, model: str | None = None) -> int: ...

    def interactive_waiting(self, model: str | None = None) -> bool: ...


@dataclass(slots=True)
class Running:
    job: Job
    line: Line
    task: asyncio.Task[None]
    started: float
    model: str | None = None  # the model the line names, as admission knows it (None: any)

    def on(self, model: str | None) -> bool:
        """Whether the line runs on `model` (None: any model), as far as is known."""
        return model is None or self.model is None or self.model == model


@dataclass(slots=True)
class RunnerStats:
    answered: int = 0
    cut: int = 0
    lost: int = 0  # lines no longer this replica's (another held them, or they closed)
    failed: int = 0  # runs that failed inside the engine, to run again
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queued: int = 0  # pending lines of the runnable jobs at the last tick
