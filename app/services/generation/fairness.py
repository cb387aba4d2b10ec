"""How the engine shares itself between tenants, as its fair scheduler last published it
(engine.fairness), and its step times: for GET /admin/fairness and the
`lilac_fair_share_` series.

The engine core publishes a small file per model about once a second while anything
changes, at a path every process of the server agrees on (`LILAC_FAIRNESS_DIR`), so any
frontend reads it. The read is a small local file, done where it is asked for. Without
that folder set nothing was published in this server, and none is made here."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from app.schemas.fairness import EngineSteps, FairnessList, ModelFairness, TenantFairness
from app.services.generation.sampling import resolve_model
from app.tenancy.scope import ANONYMOUS_OWNER
from engine.fairness import (
    SHARES_DIR_ENV,
    StepTimes,
    TenantShare,
    read_shares,
    read_steps,
    shares_file,
)
from engine.protocol import DEFERRED_PREFIX
from engine.warm.model import WarmModel
from engine.warm.pool import ModelPool

KEY_PREFIX = "key:"
# A snapshot older than this while the model has requests is stale: the scheduler
# publishes about once a second while anything changes.
STALE_AFTER_S = 5.0


def tenant_identity(tenant: str) -> tuple[str | None, bool]:
    """The API key id a tenant name carries (None when it names no key) and whether it
    is deferred work: `key:<id>`, `deferred:<key id>` (a batch or background owner)."""
    deferred = tenant.startswith(DEFERRED_PREFIX)
    rest = tenant.removeprefix(DEFERRED_PREFIX)
    if rest.startswith(KEY_PREFIX):
        return rest.removeprefix(KEY_PREFIX) or None, deferred
    if deferred and rest and ":" not in rest and rest != ANONYMOUS_OWNER:
        return rest, deferred
    return None, deferred


def published(model: str) -> tuple[float, list[TenantShare]]:
    """The shares the engine of `model` (its first served name) last published, and when;
    `(0.0, [])` when it has published none."""
    if not os.environ.get(SHARES_DIR_ENV):
        return 0.0, []
    return read_shares(shares_file(model))


def published_steps(model: str) -> EngineSteps:
    """The step times the engine of `model` last published; zeros when none."""
    steps = read_steps(shares_file(model)) if os.environ.get(SHARES_DIR_ENV) else StepTimes()
    return EngineSteps(
        count=int(steps.count),
        mean_s=float(steps.mean_s),
        p95_s=float(steps.p95_s),
        max_s=float(steps.max_s),
    )


def is_stale(published_at: float, busy: bool, now: float) -> bool:
    """Never published, or not for `STALE_AFTER_S` while the model has requests."""
    return published_at <= 0 or (busy and now - published_at > STALE_AFTER_S)


def tenant_row(share: TenantShare) -> TenantFairness:
    """One published tenant on the wire (the file's JSON may hold whole numbers)."""
    key_id, deferred = tenant_identity(share.tenant)
    return TenantFairness(
        tenant=share.tenant,
        key_id=key_id,
        deferred=deferred,
        counter=float(share.counter),
        weight=float(share.weight),
        active=int(share.active),
        share_last_minute=float(share.share),
        tokens=int(share.tokens),
        engine_queue_wait_s=float(share.queue_wait_s),
    )


class FairnessView:
    """Each served model's fairness snapshot, read at the time it is asked for."""

    def __init__(
        self, models: ModelPool, fair_share: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.models = models
        self.fair_share = fair_share
        self.clock = clock

    def model(self, model: WarmModel) -> ModelFairness:
        published_at, shares = published(model.name)
        # Its requests: this process's in flight, or those the snapshot itself counts.
        busy = model.in_flight > 0 or any(s.active for s in shares)
        return ModelFairness(
            model=model.name,
            fair_share=self.fair_share,
            published_at=published_at or None,
            stale=is_stale(published_at, busy, self.clock()),
            tenants=[tenant_row(s) for s in shares],
            engine_steps=published_steps(model.name),
        )

    def report(self, name: str | None = None) -> FairnessList:
        """Every served model, or the one `name` names (an unknown one: 404)."""
        chosen = [resolve_model(self.models, name)] if name is not None else self.models.models
        return FairnessList(data=[self.model(m) for m in chosen])
