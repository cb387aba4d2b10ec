"""GET /admin/fairness: how each served model's engine shares itself between tenants
(keys, their deferred work, unkeyed clients), as its fair scheduler last published it;
`model` narrows to one model. Behind the admin key, as every `/admin` route."""

from __future__ import annotations

from typing import Annotated

from litestar import Router, get
from litestar.params import Dependency

from app.routes.admin.admission import AdminKeyGuard
from app.schemas.fairness import FairnessList
from app.services.generation.fairness import FairnessView

FairnessDep = Annotated[FairnessView, Dependency(skip_validation=True)]  # `fairness`


@get("/fairness")
async def admin_fairness(fairness: FairnessDep, model: str | None = None) -> FairnessList:
    """Each model's tenants: service counter, weight, requests in the engine, share of
    the last minute, tokens and engine queue wait; the engine's step times over the last
    minute (`engine_steps`); `stale` when the snapshot is old."""
    return fairness.report(model)


def admin_fairness_router(admin_key: str | None) -> Router:
    return Router(path="/admin", route_handlers=[admin_fairness], guards=[AdminKeyGuard(admin_key)])
