"""A fair share of the engine between tenants: the Virtual Token Counter.

Each tenant (the fairness identity the HTTP side hands the engine: a key) has a
counter of the service the engine has given it, in weighted tokens divided by the
tenant's `weight`. Whoever has the lowest counter is served next (Sheng et al.,
"Fairness in Serving Large Language Models", OSDI 2024). A tenant that comes back
from idle starts at the lowest counter among the active ones, so idleness banks no
credit; a tenant that leaves keeps its counter while it is remembered, so leaving for
a moment buys no reset.

Pure: no clocks of its own, no vLLM. The engine's scheduler (in the engine-core
process, engine.vllm_backend.fair_scheduler) keeps one ledger per engine; admission
(engine.admission.queue) keeps one per process for its own queue.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Service weights, per token, measured on this engine (`python -m perf token-costs`: on
# the 2-core CPU of perf/RESULTS.md an output token took the engine 2.6-2.9 times a
# computed prompt token's time at a batch of 16, at step budgets of 512 and 2,048); a
# cached prompt token costs only its share of the attention.
PROMPT_TOKEN_COST = 1.0
CACHED_TOKEN_COST = 0.1
OUTPUT_TOKEN_COST = 2.75

# A request's output budget counts into its tenant's counter when it starts, up to this
# many tokens (VTC's variant with a length prediction, the budget as the prediction):
# a tenant whose many requests start at once ranks as what they will cost, not as what
# they have cost so far, and one back from idle takes no burst of seats.
PREPAY_LIMIT = 1024

WINDOW_S = 60.0  # the "last minute" of the shares the admin API shows
FORGET_IDLE_S = 600.0  # an idle tenant's counter is dropped after this long
MAX_WEIGHT = 1000.0

# How a request tells the engine's scheduler whose it is: its sampling parameters'
# `extra_args`, and the scheduler's settings in vLLM's `additional_config`.
TENANT_ARG = "lilac_tenant"
WEIGHT_ARG = "lilac_weight"
CONFIG_KEY = "lilac_fairness"
UNNAMED = "-"
# The folder where each engine core publishes its tenants' shares, made once per server
# and inherited by every process it starts (frontends, engine cores).
SHARES_DIR_ENV = "LILAC_FAIRNESS_DIR"


def tenant_args(tenant: str | None, weight: float) -> dict[str, str | float]:
    """The `extra_args` that tell the engine's scheduler whose request it is."""
    return {TENANT_ARG: tenant or UNNAMED, WEIGHT_ARG: float(weight)}


@dataclass(frozen=True, slots=True)
class ServiceCosts:
    prompt: float = PROMPT_TOKEN_COST
    cached: float = CACHED_TOKEN_COST
    output: float = OUTPUT_TOKEN_COST

    @classmethod
    def from_settings(cls, settings: dict[str, float]) -> ServiceCosts:
        return cls(
            prompt=float(settings.get("prompt_cost", PROMPT_TOKEN_COST)),
            cached=float(settings.get("cached_cost", CACHED_TOKEN_COST)),
            output=float(settings.get("output_cost", OUTPUT_TOKEN_COST)),
        )

    def of(self, prompt: int, cached: int, output: int) -> float:
        return prompt * self.prompt + cached * self.cached + output * self.output


@dataclass(slots=True)
class TenantState:
    counter: float = 0.0
    weight: float = 1.0
    active: int = 0  # requests it has waiting or running
    idle_since: float = 0.0
    # (time, weighted service) of the last window, oldest first, and their sum.
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    recent_sum: float = 0.0
    tokens: int = 0  # prompt and output tokens served since it was first seen
    waits: deque[tuple[float, float]] = field(default_factory=deque)  # (time, queue wait s)


@dataclass(frozen=True, slots=True)
class TenantShare:
    """One tenant as the admin API shows it."""

    tenant: str
    counter: float  # weighted service / weight, relative to the lowest active counter
    weight: float
    active: int  # requests waiting or running in the engine
    share: float  # of the weighted service of the last minute, 0..1
    tokens: int
    queue_wait_s: float  # mean wait in the engine's queue over the last minute


def clamp_weight(weight: float) -> float:
    if not weight > 0:  # also NaN
        return 1.0
    return min(weight, MAX_WEIGHT)


class ServiceLedger:
    """Per-tenant service counters (see module)."""

    def __init__(self, costs: ServiceCosts | None = None) -> None:
        self.costs = costs or ServiceCosts()
        self.tenants: dict[str, TenantState] = {}
        self._forgotten_at = 0.0

    def arrive(self, tenant: str, weight: float = 1.0) -> None:
        """A request of `tenant` enters: a tenant back from idle is lifted to the lowest
        counter among the active ones (never lowered)."""
        state = self.tenants.get(tenant)
        if state is None:
            state = self.tenants[tenant] = TenantState()
        state.weight = clamp_weight(weight)
        if state.active == 0:
            floor = self.lowest_active()
            if floor is not None and state.counter < floor:
                state.counter = floor
        state.active += 1

    def leave(self, tenant: str, now: float) -> None:
        state = self.tenants.get(tenant)
        if state is None or state.active == 0:
            return
        state.active -= 1
        if state.active == 0:
            state.idle_since = now

    def prepay(self, tenant: str, output: int) -> None:
        """`output` tokens a request of `tenant` may yet produce count into its counter
        now; `charge(prepaid=...)` then draws on them, `refund` returns the rest."""
        state = self.tenants.get(tenant)
        if state is not None:
            state.counter += output * self.costs.output / state.weight

    def refund(self, tenant: str, output: int) -> None:
        """Prepaid output tokens a request did not produce (it stopped or was cut)."""
        state = self.tenants.get(tenant)
        if state is not None:
            state.counter -= output * self.costs.output / state.weight

    def charge(
        self,
        tenant: str,
        now: float,
        prompt: int = 0,
        cached: int = 0,
        output: int = 0,
        prepaid: int = 0,
    ) -> None:
        """The engine served `tenant` these tokens; `prepaid` of the output tokens were
        counted into its counter already (they still count in its shares)."""
        state = self.tenants.get(tenant)
        if state is None:
            return
        service = self.costs.of(prompt, cached, output)
        state.counter += (service - prepaid * self.costs.output) / state.weight
        state.tokens += prompt + cached + output
        state.recent.append((now, service))
        state.recent_sum += service
        self._expire(state, now)

    def waited(self, tenant: str, now: float, seconds: float) -> None:
        """A request of `tenant` waited `seconds` in the engine's queue before it ran."""
        state = self.tenants.get(tenant)
        if state is not None:
            state.waits.append((now, seconds))
            while state.waits and state.waits[0][0] < now - WINDOW_S:
                state.waits.popleft()

    def counter(self, tenant: str) -> float:
        state = self.tenants.get(tenant)
        return state.counter if state is not None else (self.lowest_active() or 0.0)

    def lowest_active(self) -> float | None:
        counters = [s.counter for s in self.tenants.values() if s.active]
        return min(counters) if counters else None

    def forget_idle(self, now: float) -> None:
        """Drop tenants idle longer than `FORGET_IDLE_S`: back, they start at the lowest
        active counter anyway, which is all their old counter would have bought."""
        stale = [
            name
            for name, s in self.tenants.items()
            if not s.active and now - s.idle_since > FORGET_IDLE_S
        ]
        for name in stale:
            del self.tenants[name]

    def shares(self, now: float) -> list[TenantShare]:
        """Every tenant active now or served in the last minute, heaviest first."""
        for state in self.tenants.values():
            self._expire(state, now)
        total = sum(s.recent_sum for s in self.tenants.values())
        floor = self.lowest_active() or 0.0
        rows = [
            TenantShare(
                tenant=name,
                counter=round(max(0.0, s.counter - floor), 3),
                weight=s.weight,
                active=s.active,
                share=round(s.recent_sum / total, 4) if total > 0 else 0.0,
                tokens=s.tokens,
                queue_wait_s=round(_mean(s.waits), 4),
            )
            for name, s in self.tenants.items()
            if s.active or s.recent
        ]
        return sorted(rows, key=lambda r: (-r.share, r.tenant))

    @staticmethod
    def _expire(state: TenantState, now: float) -> None:
        recent = state.recent
        while recent and recent[0][0] < now - WINDOW_S:
            state.recent_sum -= recent.popleft()[1]
        if not recent:
            state.recent_sum = 0.0


def _mean(samples: deque[tuple[float, float]]) -> float:
    return sum(s for _, s in samples) / len(samples) if samples else 0.0


def shares_file(model: str) -> Path:
    """Where the engine serving `model` publishes its shares: the same path in every
    process of one server."""
    folder = os.environ.get(SHARES_DIR_ENV)
    if not folder:
        folder = tempfile.mkdtemp(prefix="lilac-fairness-")
        os.environ[SHARES_DIR_ENV] = folder
    name = hashlib.sha256(model.encode()).hexdigest()[:16]
    return Path(folder) / f"shares-{name}.json"


@dataclass(frozen=True, slots=True)
class StepTimes:
    """The engine's steps over the last minute: how long a request that arrives during
    one waits for it to end, at most."""

    count: int = 0
    mean_s: float = 0.0
    p95_s: float = 0.0
    max_s: float = 0.0


class StepClock:
    """Times the engine's steps, each from one `schedule` to the next (the step it
    scheduled ran in between), counting only steps that scheduled work."""

    def __init__(self) -> None:
        self._last: float | None = None
        self._steps: deque[tuple[float, float]] = deque()  # (end, seconds)

    def scheduled(self, now: float, busy: bool) -> None:
        if self._last is not None:
            self._steps.append((now, now - self._last))
        self._last = now if busy else None
        while self._steps and self._steps[0][0] < now - WINDOW_S:
            self._steps.popleft()

    def times(self) -> StepTimes:
        durations = sorted(seconds for _, seconds in self._steps)
        if not durations:
            return StepTimes()
        p95 = durations[min(len(durations) - 1, int(0.95 * len(durations)))]
        mean = sum(durations) / len(durations)
        return StepTimes(len(durations), round(mean, 4), round(p95, 4), round(durations[-1], 4))


def write_shares(
    path: str | Path, shares: list[TenantShare], now: float, steps: StepTimes | None = None
) -> None:
    """Publish `shares` (and the engine's step times) where another process reads them
    (`read_shares`, `read_steps`): a whole file or none, never half of one."""
    target = Path(path)
    payload = {
        "time": now,
        "tenants": [asdict(s) for s in shares],
        "steps": asdict(steps or StepTimes()),
    }
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fairness-")
    with os.fdopen(fd, "w") as out:
        json.dump(payload, out)
    os.replace(tmp, target)


def read_shares(path: str | Path) -> tuple[float, list[TenantShare]]:
    """The shares last published at `path` and when; nothing when there are none yet."""
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return 0.0, []
    return float(payload["time"]), [TenantShare(**row) for row in payload["tenants"]]


def read_steps(path: str | Path) -> StepTimes:
    """The engine's step times last published at `path`."""
    try:
        payload = json.loads(Path(path).read_text())
        return StepTimes(**payload["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return StepTimes()
