"""Wire types of GET /admin/fairness: each served model's tenants as its engine's fair
scheduler last published them (engine.fairness)."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct


class TenantFairness(Struct):
    """One tenant (the fairness identity a request was handed to the engine under)."""

    tenant: str  # `key:<id>`, `deferred:<owner>`, `user:<name>`, `peer:<address>` or `-`
    key_id: str | None  # the API key's id, for `key:` and `deferred:` tenants
    deferred: bool  # batch lines and background responses
    counter: float  # weighted service / weight, ahead of the least-served active tenant
    weight: float
    active: int  # requests waiting or running in the engine
    share_last_minute: float  # of the engine's weighted service in the last minute, 0..1
    tokens: int  # prompt and output tokens served since the engine first saw it
    engine_queue_wait_s: float  # mean wait in the engine's queue over the last minute


class EngineSteps(Struct):
    """The engine's steps over the last minute, each timed from one schedule call to the
    next while busy: a request that arrives during a step waits for it to end."""

    count: int
    mean_s: float
    p95_s: float
    max_s: float


class ModelFairness(Struct):
    model: str
    fair_share: bool  # the fair scheduler is on (`--fair-share`)
    published_at: float | None  # unix time of the engine's last snapshot; null: none yet
    # The snapshot is old (over a few seconds while the model has requests) or missing.
    stale: bool
    tenants: list[TenantFairness]  # heaviest share first
    engine_steps: EngineSteps  # all zero: none in the last minute, or none published


class FairnessList(Struct):
    data: list[ModelFairness]
    object: Literal["list"] = "list"
