"""The types and protocols the deferred-work runner works with: `Cut` (a line that cannot
run to its answer now and goes back to pending), `Answer` (a line's result and usage row),
`Handler` (what a kind of job does with its lines and itself), `Capacity` (what admission
tells the runner about room for deferred work and interactive load), `Running` (a line the
runner has started) and `RunnerStats` (its counters). They live apart from the runner
(`app.deferred.runner`) so that handlers can name them without importing it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from app.deferred.store import Job, Line, LineCounts
from app.tenancy.usage import UsageRecord


class Cut(Exception):
    """The line could not run to its answer now (no capacity, a drain, the engine not
    ready): it goes back to pending and runs later."""


@dataclass(slots=True)
class Answer:
    result: str  # the line's answer, a JSON line
    ok: bool
    record: UsageRecord | None  # its usage row (None: unmetered)


class Handler(Protocol):
    """What a kind of job does with its lines and, once all are answered, with itself."""

    kind: str
    active_states: tuple[str, ...]  # the job states the runner looks after
    runnable_states: tuple[str, ...]  # of those, the ones whose lines may start

    async def run(self, job: Job, line: Line) -> Answer: ...

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
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queued: int = 0  # pending lines of the runnable jobs at the last tick
