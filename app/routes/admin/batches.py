"""GET /admin/batches: every key's batches, newest first, for operators (admin key);
`status` narrows to one status, `after` and `limit` page as /v1/batches does."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Router, get
from litestar.params import Dependency

from app.deferred.runner import DeferredRunner
from app.errors import InvalidRequest
from app.routes.admin.admission import AdminKeyGuard
from app.routes.batches import MAX_LIMIT, BatchesDep
from app.schemas.batches import BatchStatus
from app.services.batches.jobs import KIND

RunnerDep = Annotated[DeferredRunner, Dependency(skip_validation=True)]  # `batch_runner`
STATUSES: tuple[str, ...] = BatchStatus.__args__  # type: ignore[attr-defined]  # a Literal's values


@get("/batches")
async def admin_list_batches(
    batches: BatchesDep,
    batch_runner: RunnerDep,
    status: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"`status` must be one of {', '.join(STATUSES)}.", param="status")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"`limit` must be from 1 to {MAX_LIMIT}.", param="limit")
    states = (status,) if status is not None else None
    jobs = await batches.store.list_jobs(KIND, None, after=after, limit=limit + 1, states=states)
    page = await batches.page(jobs, limit)
    owners = {job.id: job.owner for job in jobs}
    data = [{**msgspec.to_builtins(batch), "owner": owners[batch.id]} for batch in page.data]
    return {
        "object": "list",
        "data": data,
        "has_more": page.has_more,
        "last_id": page.last_id,
        "runner": {
            "replica": batch_runner.replica,
            "running": len(batch_runner.running),
            "concurrency": batch_runner.concurrency,
            "answered": batch_runner.stats.answered,
            "cut": batch_runner.stats.cut,
        },
    }


def admin_batches_router(admin_key: str | None) -> Router:
    return Router(
        path="/admin", route_handlers=[admin_list_batches], guards=[AdminKeyGuard(admin_key)]
    )
