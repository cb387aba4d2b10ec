"""Operator routes of the served models: put one to sleep, or wake it, ahead of the
traffic that would. Behind the admin key, as every `/admin` route."""

from __future__ import annotations

from typing import Any

from litestar import Router, get, post

from app.routes.admin.admission import AdminKeyGuard
from app.routes.deps import ModelsDep
from app.services.generation.sampling import resolve_model
from engine.warm.model import WarmModel


def _status(model: WarmModel) -> dict[str, Any]:
    config = model.config
    return {
        "id": model.name,
        "state": str(model.state),
        "in_flight": model.in_flight,
        "wakes": model.wakes,
        "keep_alive_s": config.keep_alive_s,
        "memory_gib": config.memory_gib,
        "pinned": config.pinned,
    }


@get("/")
async def models_status(models: ModelsDep) -> dict[str, Any]:
    return {"budget_gib": models.budget_gib, "data": [_status(m) for m in models.models]}


@post("/{model_id:str}/sleep", status_code=200)
async def model_sleep(model_id: str, models: ModelsDep) -> dict[str, Any]:
    """Sleep an idle model now (409 when it is pinned, busy or the owner has the box)."""
    model = resolve_model(models, model_id)
    await models.sleep(model)
    return _status(model)


@post("/{model_id:str}/wake", status_code=200)
async def model_wake(model_id: str, models: ModelsDep) -> dict[str, Any]:
    """Wake a model now (503 with Retry-After when it cannot)."""
    model = resolve_model(models, model_id)
    await models.wake(model)
    return _status(model)


def admin_models_router(admin_key: str | None) -> Router:
    """The model routes under /admin/models, behind the admin key."""
    return Router(
        path="/admin/models",
        route_handlers=[models_status, model_sleep, model_wake],
        guards=[AdminKeyGuard(admin_key)],
    )
