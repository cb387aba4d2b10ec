"""The runner's policy beside interactive requests, with a scripted capacity and a real
store (both databases): an arriving interactive request cuts the lines over what may run
beside it (pending again, neither billed nor failed), no line starts while interactive
requests run or for `resume_after_s` after, and then lines fill the concurrency again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.deferred.runner import DeferredRunner
from app.deferred.store import ANSWERED, PENDING, RUNNING, DeferredStore, Job, Line, LineCounts
from app.deferred.work import Answer, RunBill
from app.storage.database import TenantDatabase
from app.tenancy.usage.records import UsageRecord
from tests.unit.app.deferred.test_store import Clock, job, record, store_of, usage_count


@dataclass
class ScriptedCapacity:
    """Admission as the runner sees it, set by the test: `interactive` and `waiting`
    are on `on_model` (None: every model)."""

    interactive: int = 0
    waiting: bool = False
    open: bool = True
    room: int = 100
    prefilling: int = 0
    on_model: str | None = None

    def admitting(self) -> bool:
        return self.open

    def deferred_room(self) -> int:
        return self.room if self.open else 0

    def deferred_running(self) -> int:
        return 0

    def deferred_prefilling(self) -> int:
        return self.prefilling

    def _on(self, model: str | None) -> bool:
        return model is None or self.on_model is None or model == self.on_model

    def interactive_running(self, model: str | None = None) -> int:
        return self.interactive if self._on(model) else 0

    def interactive_waiting(self, model: str | None = None) -> bool:
        return self.waiting and self._on(model)


class HeldLines:
    """Lines that run until the test lets them finish."""

    kind = "batch"
    active_states: tuple[str, ...] = ("in_progress",)
    runnable_states: tuple[str, ...] = ("in_progress",)

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.started: list[int] = []

    async def run(self, job: Job, line: Line, bill: RunBill | None = None) -> Answer:
        self.started.append(line.seq)
        await self.go.wait()
        return Answer(f'{{"seq": {line.seq}}}', True, record(f"r{line.seq}"))

    async def tend(self, job: Job, counts: LineCounts) -> None:
        return None


class TwoModelLines(HeldLines):
    """Held lines on two models: even lines name `alpha`, odd ones `beta`."""

    def line_model(self, job: Job, line: Line) -> str | None:
        return "alpha" if line.seq % 2 == 0 else "beta"


async def _setup(
    database: AsyncEngine, lines: int = 6, handler: HeldLines | None = None
) -> tuple[DeferredRunner, ScriptedCapacity, HeldLines, Clock]:
    clock = Clock()
    store = store_of(database, clock)
    await store.create(job(), [f'{{"n": {i}}}' for i in range(lines)])
    capacity = ScriptedCapacity()
    handler = handler or HeldLines()
    runner = DeferredRunner(
        store,
        capacity,
        [handler],
        replica="r1",
        concurrency=4,
        beside_interactive=1,
        resume_after_s=2.0,
        jobs_every_s=0.0,
        clock=clock,
    )
    return runner, capacity, handler, clock


async def _settle(runner: DeferredRunner) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    await runner.drain_lines([r.task for r in runner.running.values() if r.task.cancelling()])


async def test_an_arriving_interactive_request_cuts_the_newest_lines(
    database: AsyncEngine,
) -> None:
    runner, capacity, handler, clock = await _setup(database)
    await runner.step()
    assert len(runner.running) == 4
    await asyncio.sleep(0)
    oldest = min(runner.running.values(), key=lambda r: r.started).line.seq
    runner.interactive_arrived()  # what admission calls as the request is offered
    await _settle(runner)
    assert [r.line.seq for r in runner.running.values()] == [oldest]
    assert runner.stats.cut == 3
    counts = (await runner.store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {PENDING: 5, RUNNING: 1}  # cut lines are pending, not failed
    assert await usage_count(database) == 0  # and not billed

    # While interactive requests run, and for resume_after_s after, nothing new starts.
    capacity.interactive = 2
    for _ in range(3):
        await runner.step()
    assert len(runner.running) == 1
    capacity.interactive = 0
    clock.now += 1.0
    await runner.step()
    assert len(runner.running) == 1, "resumed before the hysteresis"
    clock.now += 1.5
    await runner.step()
    assert len(runner.running) == 4

    handler.go.set()
    for _ in range(10):
        await runner.step()
        await runner.drain_lines()
    counts = (await runner.store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {ANSWERED: 6}
    assert await usage_count(database) == 6  # each line billed once, cut or not


async def test_a_steady_interactive_load_keeps_lines_out(database: AsyncEngine) -> None:
    """Gaps shorter than resume_after_s between interactive requests let no line in."""
    runner, capacity, handler, clock = await _setup(database)
    runner.beside_interactive = 0
    for _ in range(10):
        capacity.interactive = 1
        await runner.step()
        assert not runner.running
        capacity.interactive = 0
        clock.now += 0.5
        await runner.step()
        assert not runner.running
    clock.now += 2.0
    await runner.step()
    assert len(runner.running) == 4
    await asyncio.sleep(0)
    assert len(handler.started) == 4
    await runner.cut_all()


async def test_the_tick_cuts_lines_when_an_interactive_request_is_seen_running(
    database: AsyncEngine,
) -> None:
    """Without the admission hook (another path into the engine), the next tick cuts."""
    runner, capacity, _, _ = await _setup(database)
    runner.beside_interactive = 0
    await runner.step()
    assert len(runner.running) == 4
    capacity.interactive = 1
    await runner.step()
    await _settle(runner)
    assert not runner.running and runner.stats.cut == 4
    counts = (await runner.store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {PENDING: 6}


async def test_a_reclaim_cuts_every_line(database: AsyncEngine) -> None:
    runner, capacity, _, _ = await _setup(database)
    await runner.step()
    capacity.open = False
    await runner.step()
    await _settle(runner)
    assert not runner.running
    counts = (await runner.store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {PENDING: 6}


async def test_an_idle_runner_looks_for_jobs_less_often_and_at_once_when_woken(
    database: AsyncEngine,
) -> None:
    """With no job and no line running, the runner looks at the jobs every
    `idle_jobs_every_s` (each look is a database query and a wake-up of the process); a
    job another replica makes is found by then, one made here (`wake`) at once."""
    clock = Clock()
    store = store_of(database, clock)
    runner = DeferredRunner(
        store, ScriptedCapacity(), [HeldLines()], replica="r1", concurrency=4, clock=clock
    )
    await runner.step()  # the first look: nothing there
    assert runner._wait_s() == runner.idle_jobs_every_s

    await store.create(job("batch_b"), ['{"n": 0}'])  # made by another replica
    clock.now += runner.jobs_every_s
    await runner.step()
    assert not runner.running, "an idle runner looked again after jobs_every_s"
    clock.now += runner.idle_jobs_every_s
    await runner.step()
    assert len(runner.running) == 1
    assert runner._wait_s() == runner.tick_s  # busy again: every tick

    await runner.cut_all()


async def test_a_job_made_here_wakes_an_idle_runner_at_once(database: AsyncEngine) -> None:
    clock = Clock()
    store = store_of(database, clock)
    runner = DeferredRunner(
        store, ScriptedCapacity(), [HeldLines()], replica="r1", concurrency=4, clock=clock
    )
    await runner.step()
    await store.create(job("batch_c"), ['{"n": 0}', '{"n": 1}'])
    runner.wake()  # what the batches and background services call on a new job
    await runner.step()
    assert sorted(r.line.seq for r in runner.running.values()) == [0, 1]
    await runner.cut_all()


class Finalizing(HeldLines):
    """A job the runner looks after but starts no line of (validating, finalizing)."""

    runnable_states: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.tended = 0

    async def tend(self, job: Job, counts: LineCounts) -> None:
        self.tended += 1


async def test_a_job_being_finalized_keeps_the_runner_looking_every_second(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    store = store_of(database, clock)
    await store.create(job("batch_d"), ['{"n": 0}'])
    handler = Finalizing()
    runner = DeferredRunner(store, ScriptedCapacity(), [handler], replica="r1", clock=clock)
    await runner.step()
    assert handler.tended == 1 and not runner.running
    assert runner._wait_s() == runner.tick_s
    clock.now += runner.jobs_every_s
    await runner.step()
    assert handler.tended == 2


@dataclass
class AdmittedCapacity(ScriptedCapacity):
    """Every started line admitted at once; `first_tokens` of them prefilled."""

    runner: DeferredRunner | None = None
    first_tokens: int = 0

    def deferred_running(self) -> int:
        assert self.runner is not None
        return len(self.runner.running)

    def deferred_prefilling(self) -> int:
        return self.deferred_running() - self.first_tokens


async def _held_lines(
    database: AsyncEngine, prefill_lines: int
) -> tuple[DeferredRunner, AdmittedCapacity, HeldLines]:
    """Ten lines held once started, a concurrency of 6, every started line admitted."""
    clock = Clock()
    store = store_of(database, clock)
    await store.create(job(), [f'{{"n": {i}}}' for i in range(10)])
    capacity = AdmittedCapacity()
    handler = HeldLines()
    runner = DeferredRunner(
        store, capacity, [handler], replica="r1", concurrency=6,
        prefill_lines=prefill_lines, jobs_every_s=0.0, clock=clock,
    )  # fmt: skip
    capacity.runner = runner
    return runner, capacity, handler


async def test_lines_enter_the_engine_a_few_at_a_time(database: AsyncEngine) -> None:
    runner, capacity, handler = await _held_lines(database, prefill_lines=2)
    await runner.step()
    assert len(runner.running) == 2  # two prompts waiting to prefill: no more start
    await runner.step()
    assert len(runner.running) == 2
    capacity.first_tokens = 2  # both prefilled: admission calls `prefilled`
    runner.prefilled()
    await runner.step()
    assert len(runner.running) == 4
    capacity.first_tokens = 3
    await runner.step()
    assert len(runner.running) == 5  # one prefilling: one more may
    capacity.first_tokens = 5
    await runner.step()
    assert len(runner.running) == 6  # and never past the concurrency
    handler.go.set()
    await runner.drain_lines()
    await runner.close()


async def test_no_prefill_bound_starts_the_concurrency_at_once(database: AsyncEngine) -> None:
    runner, _, handler = await _held_lines(database, prefill_lines=0)
    await runner.step()
    assert len(runner.running) == 6
    handler.go.set()
    await runner.drain_lines()
    await runner.close()


async def test_lines_not_yet_admitted_count_as_prefilling(database: AsyncEngine) -> None:
    """A line started but not yet through admission will prefill too: it takes a place."""
    runner, _, handler, _ = await _setup(database)
    runner.prefill_lines = 3  # the scripted capacity admits nothing: all are starting
    await runner.step()
    assert len(runner.running) == 3
    await runner.step()
    assert len(runner.running) == 3
    handler.go.set()
    await runner.drain_lines()


class CountingStore(DeferredStore):
    """The real store, noting each release it is asked for."""

    releases: list[int]

    async def release_many(
        self,
        held: list[tuple[str, int]],
        replica: str,
        counted: bool = True,
        records: dict[tuple[str, int], UsageRecord] | None = None,
    ) -> int:
        self.releases.append(len(held))
        return await super().release_many(held, replica, counted, records)


async def test_lines_cut_together_are_released_in_one_transaction(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    url = database.url.render_as_string(hide_password=False)
    store = CountingStore(TenantDatabase(url, database), clock)
    store.releases = []
    await store.create(job(), [f'{{"n": {i}}}' for i in range(6)])
    handler = HeldLines()
    runner = DeferredRunner(
        store, ScriptedCapacity(), [handler], replica="r1", concurrency=4,
        beside_interactive=0, jobs_every_s=0.0, clock=clock,
    )  # fmt: skip
    await runner.step()
    await asyncio.sleep(0)
    assert len(handler.started) == 4
    runner.interactive_arrived()
    await _settle(runner)
    assert store.releases == [4]
    counts = (await store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {PENDING: 6}
    assert runner.stats.cut == 4 and not runner.running


def _models_running(runner: DeferredRunner) -> list[str]:
    return sorted((r.model or "") for r in runner.running.values())


async def test_a_request_for_one_model_cuts_only_that_models_lines(
    database: AsyncEngine,
) -> None:
    """Each model has its own engine and admission: a request for `alpha` cuts the
    `alpha` lines over what may run beside it, and leaves the `beta` lines running."""
    runner, capacity, handler, _clock = await _setup(database, handler=TwoModelLines())
    await runner.step()
    await asyncio.sleep(0)
    assert _models_running(runner) == ["alpha", "alpha", "beta", "beta"]
    oldest_alpha = min(
        (r for r in runner.running.values() if r.model == "alpha"), key=lambda r: r.started
    )
    runner.interactive_arrived("alpha")  # admission passes the ticket's model
    await _settle(runner)
    assert _models_running(runner) == ["alpha", "beta", "beta"]
    assert oldest_alpha.line.seq in {r.line.seq for r in runner.running.values()}
    assert runner.stats.cut == 1

    # The tick sees alpha's request running: beta's lines still run beside it.
    capacity.interactive, capacity.on_model = 1, "alpha"
    await runner.step()
    await _settle(runner)
    assert _models_running(runner) == ["alpha", "beta", "beta"]

    # A request waiting for beta makes room on beta, not on alpha.
    capacity.interactive, capacity.waiting, capacity.on_model = 0, True, "beta"
    runner.make_room("beta")
    await _settle(runner)
    assert _models_running(runner) == ["alpha", "beta"]
    runner.make_room("alpha")
    await _settle(runner)
    assert _models_running(runner) == ["beta"]
    handler.go.set()
    await runner.drain_lines()


async def test_a_request_of_no_model_cuts_every_models_lines(database: AsyncEngine) -> None:
    """Without a model (a caller that names none), every line counts."""
    runner, _capacity, handler, _clock = await _setup(database, handler=TwoModelLines())
    await runner.step()
    await asyncio.sleep(0)
    runner.interactive_arrived()
    await _settle(runner)
    assert len(runner.running) == 1  # beside_interactive, over both models
    handler.go.set()
    await runner.drain_lines()


async def test_a_line_of_unknown_model_steps_aside_for_any_model(database: AsyncEngine) -> None:
    runner, _capacity, handler, _clock = await _setup(database, handler=HeldLines())
    await runner.step()
    await asyncio.sleep(0)
    assert len(runner.running) == 4 and {r.model for r in runner.running.values()} == {None}
    runner.interactive_arrived("beta")
    await _settle(runner)
    assert len(runner.running) == 1
    handler.go.set()
    await runner.drain_lines()
