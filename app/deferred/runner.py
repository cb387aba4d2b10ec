"""The deferred-work runner: one per replica, on the capacity interactive requests leave.

Each tick it looks after the jobs (expiry, cancellation, finalizing once every line is
answered) and starts lines while admission has room for deferred work
(`AdmissionController.deferred_room`): spare slots go first to the kind of highest
precedence with work waiting (background responses before batch lines), and within it
round the keys with work in turn, then round each key's jobs, so no key and no job
starves another. A line is
claimed under a lease when it starts (never held unstarted), its lease renewed while it
runs, and answered in one transaction with its usage row (`DeferredStore.answer`).
What becomes of each run once it ends (answered, released, billed) is
`app.deferred.settlement`: every run the engine worked on is billed, once.

Deferred lines are the first to stop: when admission stops admitting (the owner
reclaims the GPU, a lending window closes, a drain) every running line is cut, and
while an interactive request waits the newest line is cut to make room. Beside
interactive requests only `beside_interactive` lines may run (0 by default): on a busy
engine every extra sequence slows each step of every request, and a line's prefill
delays the steps it shares, so when an interactive request arrives the newest lines over
that count are cut at once, and lines start again only once no interactive request has
run for `resume_after_s` (so a steady load with short gaps between its requests does not
let lines in and out). Lines enter the engine a few at a time: at most `prefill_lines`
wait for their first token at once, the next starting as those are prefilled, so a
batch starting (or resuming) never puts one long prefill step of many lines in the
way of an interactive request.
Each model has its own engine and admission, so the cuts are per
model: an interactive request for one model cuts only the lines on that model (a line
on another frees nothing that request waits for), and a line whose model is not known
counts as on every model. A cut line is pending again and runs later. Retries are
bounded (app.deferred.work): a line whose run failed runs again until it has failed
`MAX_FAILED_RUNS` times, and one cut `MAX_CUT_RUNS` times is answered failed without
running again. At each look at the jobs a replica also stops the lines it runs that are
no longer its own: closed meanwhile (a revoked key's batch
ends at once) or taken by another replica."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from app.deferred.settlement import RunSettlement
from app.deferred.store import DeferredStore, Job, Line
from app.deferred.work import Capacity, Cut, Handler, KeyAtLimits, RunBill, RunnerStats, Running
from app.tasks import cancel_and_wait, wait_event
from app.tenancy.deferred_limits import DeferredLimits

log = logging.getLogger("lilac.deferred")

# How often an idle runner (no job, no line running) looks for jobs: those made on this
# replica wake it at once, so only another replica's new jobs wait for this.
IDLE_JOBS_EVERY_S = 5.0
MAX_RESTING = 10_000  # keys remembered as at their deferred limits, before a sweep


class DeferredRunner:
    def __init__(
        self,
        store: DeferredStore,
        capacity: Capacity,
        handlers: list[Handler],
        *,
        replica: str,
        concurrency: int = 32,
        beside_interactive: int = 0,
        resume_after_s: float = 2.0,
        prefill_lines: int = 4,
        lease_s: float = 60.0,
        tick_s: float = 0.25,
        jobs_every_s: float = 1.0,
        idle_jobs_every_s: float = IDLE_JOBS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        should_poll: Callable[[], bool] = lambda: True,
        model_name: Callable[[str], str | None] = lambda name: name,
        limits: DeferredLimits | None = None,
    ) -> None:
        self.store = store
        self.capacity = capacity
        self.handlers = {handler.kind: handler for handler in handlers}
        self._replica = replica
        self.concurrency = concurrency
        self.beside_interactive = beside_interactive
        self.resume_after_s = resume_after_s
        self.prefill_lines = prefill_lines
        self.lease_s = lease_s
        self.tick_s = tick_s
        self.jobs_every_s = jobs_every_s
        self.idle_jobs_every_s = idle_jobs_every_s
        self._clock = clock
        self._should_poll = should_poll
        self._model_name = model_name  # a name a line gives -> the model admission knows
        self.limits = limits or DeferredLimits()  # the keys' deferred work (handlers hold it)
        self._resting: dict[str, float] = {}  # owner -> when its lines may start again
        self.running: dict[tuple[str, int], Running] = {}
        self.stats = RunnerStats()
        self._jobs: list[Job] = []
        self._active = 0  # the jobs the last look found to look after, runnable or not
        self._jobs_at = float("-inf")
        self._renewed_at = float("-inf")
        self._interactive_at = float("-inf")  # when an interactive request last ran
        self._turn = 0  # the key that gets the next spare slot
        self._exhausted: set[str] = set()  # runnable jobs with no line to claim now
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._settle = RunSettlement(store, replica, self.stats)
        self._taken: set[tuple[str, int]] = set()  # lines stopped as no longer this replica's

    @property
    def replica(self) -> str:
        return self._replica

    @replica.setter
    def replica(self, name: str) -> None:
        """This replica's name in the lines' leases (the settlement's too)."""
        self._replica = name
        self._settle.replica = self._settle.releases.replica = name

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="deferred")

    def wake(self) -> None:
        """New work (a job was created or cancelled): look at the jobs now."""
        self._jobs_at = float("-inf")
        self._wake.set()

    def prefilled(self) -> None:
        """A line's first token came (admission calls this): the next may start now."""
        self._wake.set()

    async def close(self) -> None:
        """Stop: every running line is cut and released for a later run (or replica)."""
        await cancel_and_wait(self._task)
        self._task = None
        await self.cut_all()
        for handler in self.handlers.values():
            close = getattr(handler, "close", None)  # a handler's own tasks, if it has any
            if close is not None:
                await close()

    async def _run(self) -> None:
        while True:
            try:
                if self._should_poll():
                    await self.step()
            except Exception:
                log.exception("deferred work: a step failed")
            await wait_event(self._wake, self._wait_s())
            self._wake.clear()

    def _idle(self) -> bool:
        """No job to look after (validating, running or finalizing) and no line running:
        nothing a tick could change."""
        return not self.running and not self._active

    def _wait_s(self) -> float:
        """Until the next tick: `tick_s` while there is work; idle, until the next look
        at the jobs. Every wake-up costs the process CPU (on a small VM about 0.1 ms,
        the kernel's part included), and a job made here wakes the runner at once."""
        if not self._idle():
            return self.tick_s
        if not self._should_poll():
            return self.idle_jobs_every_s
        due = self._jobs_at + self.idle_jobs_every_s - self._clock()
        return min(self.idle_jobs_every_s, max(self.tick_s, due))

    # ------------------------------------------------------------ one tick

    async def step(self) -> None:
        """One tick: cut what must stop, look after the jobs, renew leases, start lines."""
        self._preempt()
        now = self._clock()
        every = self.idle_jobs_every_s if self._idle() else self.jobs_every_s
        if now - self._jobs_at >= every:
            self._jobs_at = now
            await self._tend_jobs()
        if now - self._renewed_at >= self.lease_s / 3:
            self._renewed_at = now
            await self.store.renew(self.replica, list(self.running), self.lease_s)
        await self._fill()

    def _preempt(self) -> None:
        capacity = self.capacity
        if capacity.interactive_waiting() or capacity.interactive_running() > 0:
            self._interactive_at = self._clock()
        if not self.running:
            return
        if not capacity.admitting():
            for running in list(self.running.values()):
                running.task.cancel()
            return
        for model in {running.model for running in self.running.values()}:
            # A line of unknown model (None) steps aside for a request on any model.
            waiting = capacity.interactive_waiting(model)
            if waiting:
                self.make_room(model)
            if waiting or capacity.interactive_running(model) > 0:
                self._cut_over(self.beside_interactive, model)

    def interactive_arrived(self, model: str | None = None) -> None:
        """An interactive request for `model` (None: any) is being admitted: cut the
        lines on that model over what may run beside it now, before it reaches the
        engine (admission calls this)."""
        self._interactive_at = self._clock()
        self._cut_over(self.beside_interactive, model)

    def _cut_over(self, limit: int, model: str | None = None) -> None:
        """Cut the newest running lines on `model` over `limit` (those not already
        being cut)."""
        live = [r for r in self.running.values() if not r.task.cancelling() and r.on(model)]
        live.sort(key=lambda r: r.started)
        for running in live[max(0, limit) :]:
            running.task.cancel()

    def interactive_recently(self) -> bool:
        """Whether an interactive request ran within the last `resume_after_s`."""
        return self._clock() - self._interactive_at < self.resume_after_s

    def make_room(self, model: str | None = None) -> None:
        """An interactive request waits for `model` (None: any): cut the newest line on
        it of the lowest kind not already being cut (its slot is free as soon as the
        engine drops it)."""
        live = [r for r in self.running.values() if not r.task.cancelling() and r.on(model)]
        if live:
            max(live, key=lambda r: (-self.precedence(r.job), r.started)).task.cancel()

    async def _tend_jobs(self) -> None:
        jobs: list[Job] = []
        for handler in self.handlers.values():
            jobs += await self.store.active(handler.kind, handler.active_states)
        counts = await self.store.counts([job.id for job in jobs])
        self._active = len(jobs)
        self._jobs = []
        self._exhausted.clear()
        queued = 0
        for job in jobs:
            handler = self.handlers[job.kind]
            await handler.tend(job, counts[job.id])
            if job.state in handler.runnable_states:
                self._jobs.append(job)
                queued += counts[job.id].by_state.get("pending", 0)
        self.stats.queued = queued
        await self._stop_taken()

    async def _stop_taken(self) -> None:
        """Stop the lines running here that are no longer this replica's: closed
        meanwhile (their job ended at once: its key was revoked) or taken by another
        replica. Their answers would be refused; their engine work stops now."""
        running = {key: line for key, line in self.running.items() if not line.task.cancelling()}
        if not running:
            return
        held = await self.store.held(self.replica, list(running))
        for key, line in running.items():
            # Only the run asked about: not one that ended meanwhile, nor a new run of it.
            if key not in held and self.running.get(key) is line:
                self._taken.add(key)
                line.task.cancel()

    def _room(self) -> int:
        """Lines that may start now: within the concurrency flag and admission's room for
        deferred work, less this runner's lines started but not yet admitted."""
        starting = max(0, len(self.running) - self.capacity.deferred_running())
        # Every line in the engine's batch slows each step of an interactive request:
        # while they run, and for a while after, only `beside_interactive` lines may.
        limit = self.beside_interactive if self.interactive_recently() else self.concurrency
        room = min(limit - len(self.running), self.capacity.deferred_room() - starting)
        if self.prefill_lines > 0:
            # A line's prefill shares the engine's step with every running request: a
            # few at a time keep each step short (the next start as these get a token).
            prefilling = self.capacity.deferred_prefilling() + starting
            room = min(room, self.prefill_lines - prefilling)
        return room

    async def _fill(self) -> None:
        room = self._room()
        while room > 0:
            plan = self._plan(room)
            if not plan:
                return
            started = 0
            for job, count in plan:
                lines = await self.store.claim(job.id, self.replica, count, self.lease_s)
                if len(lines) < count:
                    self._exhausted.add(job.id)
                for line in lines:
                    self._start(job, line)
                started += len(lines)
            # Nothing started: every planned job is exhausted now, so the next plan
            # holds other jobs (of this kind, or of the next kind down) or none.
            if started == 0:
                continue
            room = self._room()

    def precedence(self, job: Job) -> int:
        """A kind's place in line: a handler's `precedence` (default 0); the lines of the
        highest kind with work start first (background responses before batch lines)."""
        return int(getattr(self.handlers[job.kind], "precedence", 0))

    def _plan(self, room: int) -> list[tuple[Job, int]]:
        """Spare slots to the highest kind with work; within it by key in turn, then by
        job within a key."""
        now = self._clock()
        waiting = [
            job
            for job in self._jobs
            if job.id not in self._exhausted and self._resting.get(job.owner, 0.0) <= now
        ]
        top = max((self.precedence(job) for job in waiting), default=0)
        by_key: dict[str, list[Job]] = {}
        for job in waiting:
            if self.precedence(job) == top:
                by_key.setdefault(job.owner, []).append(job)
        if not by_key:
            return []
        keys = sorted(by_key)
        slots: dict[str, int] = {}
        per_key = dict.fromkeys(keys, 0)
        for _ in range(room):
            key = keys[self._turn % len(keys)]
            self._turn += 1
            jobs = by_key[key]
            job = jobs[per_key[key] % len(jobs)]
            per_key[key] += 1
            slots[job.id] = slots.get(job.id, 0) + 1
        jobs_by_id = {job.id: job for job in self._jobs}
        return [(jobs_by_id[job_id], count) for job_id, count in slots.items()]

    def _start(self, job: Job, line: Line) -> None:
        task = asyncio.get_running_loop().create_task(self._line(job, line))
        model = self._line_model(job, line)
        self.running[(job.id, line.seq)] = Running(job, line, task, self._clock(), model)
        task.add_done_callback(lambda _: self._never_ran(job, line))

    def _never_ran(self, job: Job, line: Line) -> None:
        """A line cut before its task took its first step (its body never ran)."""
        if self.running.pop((job.id, line.seq), None) is None:
            return
        taken = (job.id, line.seq) in self._taken
        self._taken.discard((job.id, line.seq))
        self._settle.never_ran(job, line, taken)

    def _line_model(self, job: Job, line: Line) -> str | None:
        """The model a line runs on, as admission names it (None: not known)."""
        named = getattr(self.handlers[job.kind], "line_model", None)
        name = named(job, line) if named is not None else None
        return self._model_name(name) if name is not None else None

    async def _line(self, job: Job, line: Line) -> None:
        handler = self.handlers[job.kind]
        bill = RunBill()
        try:
            try:
                answer = await handler.run(job, line, bill)
            except (Cut, asyncio.CancelledError) as stopped:
                taken = (job.id, line.seq) in self._taken
                await self._settle.stopped(job, line, stopped, bill, taken)
                if isinstance(stopped, KeyAtLimits):  # the key's other lines wait too
                    self._rest(job.owner, stopped.retry_after_s)
                return
            await self._settle.answered(job, line, answer)
        except Exception:
            # The database failed: the line stays claimed and runs again after its lease.
            log.exception("deferred work: line %d of %s could not be answered", line.seq, job.id)
        finally:
            self.running.pop((job.id, line.seq), None)
            self._taken.discard((job.id, line.seq))
            self._wake.set()

    def _rest(self, owner: str, seconds: float) -> None:
        """`owner`'s lines start again in `seconds` (its deferred limits are reached)."""
        now = self._clock()
        self._resting[owner] = now + seconds
        if len(self._resting) > MAX_RESTING:
            self._resting = {k: t for k, t in self._resting.items() if t > now}

    async def cut_all(self) -> None:
        tasks = [running.task for running in self.running.values()]
        for task in tasks:
            task.cancel()
        await self.drain_lines(tasks)

    async def drain_lines(self, tasks: list[asyncio.Task[None]] | None = None) -> None:
        """Wait for the lines running now to end, and their releases."""
        if tasks is None:
            tasks = [running.task for running in self.running.values()]
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._settle.wait()
