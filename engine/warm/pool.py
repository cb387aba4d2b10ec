"""Several models in one server: each asleep until a request names it.

`ModelPool` holds one `engine.warm.model.WarmModel` per configured model and decides,
for all of them, when each sleeps and wakes.

The rules, all decided here under one lock so that memory is counted once:
- a model idle for its `keep_alive_s` sleeps (0: as soon as it is idle; -1: never);
  pinned models and models with requests in flight never sleep;
- before a wake, while the awake models' `memory_gib` plus the waking one's exceeds
  the budget, the least recently used idle unpinned awake model sleeps; when none can,
  the wake waits (at most `wake_wait_s`) for one to become idle;
- a wake that cannot fit (the model alone exceeds the budget, or no room came in
  time) or that raises fails with `ModelWakeFailed`; the model stays listed, asleep;
- while the owner has the accelerator (`pause_all`), every awake model is paused; on
  return (`resume_all`) those come back and sleeping ones stay asleep. A wake asked for
  meanwhile (an operator's) is done on return.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engine.errors import ModelStateConflict, ModelWakeFailed
from engine.protocol import Engine
from engine.ticks import sleep_to_tick
from engine.warm.elsewhere import AwakeElsewhereFirst
from engine.warm.model import ModelState, WarmConfig, WarmModel
from engine.warm.sleeper import Sleeper
from engine.warm.wakes import WakeBudget

log = logging.getLogger("lilac.warm")

# How often the idle check runs when no model can sleep for being idle.
NO_KEEP_ALIVE_CHECK_S = 10.0

_ROOM_POLL_S = 0.05  # how often a wake waiting for memory looks again


# Observers hear ("wake", model, seconds) after each wake and ("waiter", model, 0.0)
# for each request that waits for one.
Observer = Callable[[str, WarmModel, float], None]


class ModelPool:
    def __init__(
        self,
        sleeper: Sleeper,
        *,
        budget_gib: float | None = None,
        wake_wait_s: float = 30.0,
        idle_check_s: float = 0.5,
        retry_after_s: float = 5.0,
        wakes_per_client_per_minute: int | None = None,
        prefer_awake_elsewhere: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sleeper = sleeper
        self.budget_gib = budget_gib
        self.wake_wait_s = wake_wait_s
        self.idle_check_s = idle_check_s
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.wake_budget = WakeBudget(wakes_per_client_per_minute, lambda: self.clock())
        # In a fleet: a request's first attempt at a sleeping model goes to another box.
        self.elsewhere: AwakeElsewhereFirst | None = None
        if prefer_awake_elsewhere:
            self.elsewhere = AwakeElsewhereFirst(clock=lambda: self.clock())
        # In a fleet that publishes its models' states: whether another replica has a
        # model awake (None: it knows of no other replica, so refuse the first attempt
        # as if one might).
        self.awake_elsewhere: Callable[[str], bool | None] | None = None
        self.models: list[WarmModel] = []
        self._by_name: dict[str, WarmModel] = {}
        self._lock = asyncio.Lock()  # every state change, one at a time
        self._background: set[asyncio.Task[None]] = set()
        self.yielded = False
        # Models to bring back when the owner is done: True for those an operator woke
        # meanwhile (asleep when the owner came: the sleeper wakes them), False for
        # those the owner paused.
        self._returning: dict[WarmModel, bool] = {}
        self._released: list[WarmModel] = []
        self.observers: list[Observer] = []
        self._idle_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ membership

    def add(self, engine: Engine, config: WarmConfig | None = None) -> WarmModel:
        model = WarmModel(engine, config or WarmConfig(), self)
        for name in engine.model.served_names:
            if name in self._by_name:
                raise ValueError(f"two models are served as `{name}`")
            self._by_name[name] = model
        self.models.append(model)
        return model

    def get(self, name: str) -> WarmModel | None:
        """The model a request's `model` field names, or None."""
        return self._by_name.get(name)

    @property
    def first(self) -> WarmModel:
        return self.models[0]

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load the models one at a time (they share the box); one that does not fit
        the budget beside those already awake sleeps as soon as it has loaded."""
        for index, model in enumerate(self.models):
            if model.state is ModelState.LOADING or not model.engine.is_ready():
                await model.engine.start()
                model.state = ModelState.AWAKE
                model.last_used = self.clock()
            async with self._lock:
                if self._over_budget(model, among=self.models[:index]):
                    await self._sleep_locked(model)
        self.start_idle_checks()

    def start_idle_checks(self) -> None:
        """Sleep idle models in the background (every `idle_check_s`, and as soon as
        the last request of a `keep_alive` 0 model ends)."""
        if self._idle_task is None:
            self._idle_task = asyncio.create_task(self._idle_loop(), name="warm-models-idle")

    async def stop_idle_checks(self) -> None:
        tasks = [t for t in (self._idle_task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._idle_task = None

    async def shutdown(self) -> None:
        await self.stop_idle_checks()
        for model in self.models:
            await model.engine.shutdown()
            model.state = ModelState.LOADING  # a later start loads it again

    def request_ended(self, model: WarmModel) -> None:
        """A model with `keep_alive` 0 sleeps as soon as its last request ends, not at
        the next check."""
        if model.config.keep_alive_s == 0 and model.in_flight == 0 and self._idle_task:
            task = asyncio.create_task(self._sleep_idle_logged())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------ waking

    async def ensure_awake(
        self, model: WarmModel, *, count_waiter: bool = True, client: str | None = None
    ) -> None:
        """Return once `model` is awake: at once if it is, else after the one wake all
        its callers share. Raises `ModelWakeFailed`, and `WakeLimited` when the wake would
        be `client`'s and it has used up its wakes (joining one under way is free). A
        loading model returns at once (its engine answers "not ready" itself). With
        `prefer_awake_elsewhere`, the first attempt of a request raises `AwakeElsewhere`
        (engine.warm.elsewhere) before it would wait for a wake."""
        if model.state in (ModelState.AWAKE, ModelState.LOADING):
            return
        if self.elsewhere is not None and self._maybe_awake_elsewhere(model.name):
            self.elsewhere.check(model.name, client)
        if model.wake_task is None:
            self.wake_budget.take(client, model.name)
        if count_waiter:
            model.waiters += 1
            self._notify("waiter", model, 0.0)
        if model.wake_task is None:
            model.wake_task = asyncio.create_task(self._wake(model), name=f"wake-{model.name}")
            model.wake_task.add_done_callback(_forget_wake(model))
        # One waiter going away (its client left) must not cancel the others' wake.
        await asyncio.shield(model.wake_task)

    def _maybe_awake_elsewhere(self, name: str) -> bool:
        """False only when the fleet's published states say no other replica has `name`
        awake: the request wakes it here at once instead of bouncing off every box."""
        known = self.awake_elsewhere(name) if self.awake_elsewhere is not None else None
        return known is not False

    async def _wake(self, model: WarmModel) -> None:
        started = self.clock()
        async with self._lock:
            if model.state is not ModelState.ASLEEP:
                return
            self._check_fits_alone(model)
            model.state = ModelState.WAKING
            try:
                await self._make_room(model)
                if self.yielded:
                    self._returning[model] = True  # the owner has the box: wake on return
                else:
                    await self.sleeper.wake(model.engine)
            except ModelWakeFailed:
                model.state = ModelState.ASLEEP
                raise
            except Exception as exc:
                model.state = ModelState.ASLEEP
                log.exception("model %s failed to wake", model.name)
                raise ModelWakeFailed(
                    f"The model `{model.name}` failed to wake; retry later.", self.retry_after_s
                ) from exc
            except BaseException:
                model.state = ModelState.ASLEEP
                raise
            model.state = ModelState.AWAKE
            model.last_used = self.clock()
            model.wakes += 1
        seconds = self.clock() - started
        log.info("model %s woke in %.3f s", model.name, seconds)
        self._notify("wake", model, seconds)

    def _check_fits_alone(self, model: WarmModel) -> None:
        budget = self.budget_gib
        if budget is not None and model.config.memory_gib > budget:
            raise ModelWakeFailed(
                f"The model `{model.name}` needs {model.config.memory_gib:g} GiB and the "
                f"memory budget is {budget:g} GiB: it cannot wake.",
                self.retry_after_s,
            )

    async def _make_room(self, model: WarmModel) -> None:
        """Sleep least recently used idle models until `model` fits; wait (lock released)
        for busy ones to become idle, at most `wake_wait_s`."""
        loop = asyncio.get_running_loop()  # real time: waiting is real, whatever the clock
        deadline = loop.time() + self.wake_wait_s
        while self._over_budget(model):
            victim = self._least_recently_used_idle(besides=model)
            if victim is not None:
                await self._sleep_locked(victim)
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ModelWakeFailed(
                    f"No room to wake `{model.name}`: the memory budget "
                    f"({self.budget_gib:g} GiB) is held by models that are busy or pinned.",
                    self.retry_after_s,
                )
            self._lock.release()
            try:
                await asyncio.sleep(min(_ROOM_POLL_S, remaining))
            finally:
                await self._lock.acquire()

    def _over_budget(self, model: WarmModel, among: list[WarmModel] | None = None) -> bool:
        """Whether `model` awake beside the awake models (of `among`, else all) exceeds
        the budget."""
        if self.budget_gib is None:
            return False
        others = [m for m in (self.models if among is None else among) if m is not model]
        awake = sum(m.config.memory_gib for m in others if m.state is ModelState.AWAKE)
        return awake + model.config.memory_gib > self.budget_gib

    def _least_recently_used_idle(self, besides: WarmModel) -> WarmModel | None:
        candidates = [
            m
            for m in self.models
            if m is not besides
            and m.state is ModelState.AWAKE
            and not m.config.pinned
            and m.in_flight == 0
        ]
        return min(candidates, key=lambda m: m.last_used, default=None)

    # ------------------------------------------------------------ sleeping

    async def _sleep_locked(self, model: WarmModel) -> None:
        # Asleep before the first await: a request arriving while the engine pauses must
        # wait for a wake, not reach an engine that is about to stop scheduling.
        model.state = ModelState.ASLEEP
        try:
            await self.sleeper.sleep(model.engine)
        except BaseException:
            model.state = ModelState.AWAKE
            raise
        log.info("model %s is asleep", model.name)

    def _idle_too_long(self, model: WarmModel, now: float) -> bool:
        keep_alive = model.config.keep_alive_s
        return (
            model.state is ModelState.AWAKE
            and not model.config.pinned
            and model.in_flight == 0
            and keep_alive >= 0
            and now - model.last_used >= keep_alive
        )

    async def sleep_idle(self) -> None:
        """Sleep every model idle for longer than its keep_alive."""
        for model in self.models:
            if not self._idle_too_long(model, self.clock()):
                continue
            async with self._lock:
                if not self.yielded and self._idle_too_long(model, self.clock()):
                    await self._sleep_locked(model)

    async def _idle_loop(self) -> None:
        while True:
            await sleep_to_tick(self._idle_check_interval())  # the shared grid
            await self._sleep_idle_logged()

    def _idle_check_interval(self) -> float:
        """`idle_check_s` while some model sleeps when idle; otherwise (every model
        pinned or kept alive for ever, the default) a check now and then is enough: each
        wake-up costs the process CPU, twice a second for nothing."""
        if any(m.config.keep_alive_s >= 0 and not m.config.pinned for m in self.models):
            return self.idle_check_s
        return max(self.idle_check_s, NO_KEEP_ALIVE_CHECK_S)

    async def _sleep_idle_logged(self) -> None:
        try:
            await self.sleep_idle()
        except Exception:
            log.exception("putting idle models to sleep failed")

    # ------------------------------------------------------------ operators

    async def sleep(self, model: WarmModel) -> None:
        """An operator's sleep: refused (`ModelStateConflict`) for a loading, pinned or
        busy model, and while the owner has the box."""
        async with self._lock:
            if model.state is ModelState.ASLEEP:
                return
            if model.state is not ModelState.AWAKE:
                raise ModelStateConflict(f"The model `{model.name}` is {model.state}.")
            if model.config.pinned:
                raise ModelStateConflict(f"The model `{model.name}` is pinned: it never sleeps.")
            if model.in_flight:
                raise ModelStateConflict(
                    f"The model `{model.name}` has {model.in_flight} request(s) in flight."
                )
            if self.yielded:
                raise ModelStateConflict(
                    "The accelerator is yielded to its owner: every model is paused until "
                    "it is returned."
                )
            await self._sleep_locked(model)

    async def wake(self, model: WarmModel) -> None:
        """An operator's wake; while the owner has the box, done on return."""
        await self.ensure_awake(model, count_waiter=False)

    # ------------------------------------------------------------ the owner's reclaim

    async def pause_all(self) -> None:
        """Every awake model yields (pauses); remembered to come back on return."""
        async with self._lock:
            self.yielded = True
            for model in self.models:
                if model.state is ModelState.AWAKE and model not in self._returning:
                    await model.engine.pause()
                    self._returning[model] = False

    async def release_all(self) -> bool:
        """While yielded, free the paused models' accelerator memory where the platform
        can; True when any did."""
        for model, by_sleeper in list(self._returning.items()):
            if by_sleeper or model in self._released:
                continue
            if await model.engine.release_memory():
                self._released.append(model)
        return bool(self._released)

    async def reacquire_all(self) -> None:
        while self._released:
            await self._released[0].engine.reacquire_memory()
            self._released.pop(0)

    async def resume_all(self) -> None:
        """The models that were awake come back (and those woken meanwhile wake);
        sleeping ones stay asleep."""
        async with self._lock:
            for model, by_sleeper in list(self._returning.items()):
                if by_sleeper:
                    await self.sleeper.wake(model.engine)
                else:
                    await model.engine.resume()
                del self._returning[model]
                model.last_used = self.clock()
            self.yielded = False

    # ------------------------------------------------------------ reporting

    def _notify(self, what: str, model: WarmModel, seconds: float) -> None:
        for observer in self.observers:
            try:
                observer(what, model, seconds)
            except Exception:
                log.exception("warm-model observer failed")


def _forget_wake(model: WarmModel) -> Callable[[asyncio.Task[None]], None]:
    def forget(task: asyncio.Task[None]) -> None:
        model.wake_task = None
        if not task.cancelled():
            task.exception()  # retrieved: every waiter has it already, or none is left

    return forget
