"""GET /v1/models and GET /v1/models/{id} (ids may contain `/`: `org/model`)."""

from __future__ import annotations

from litestar import Request, get

from app.errors import ModelNotFound
from app.routes.deps import ModelsDep
from app.schemas.models import ModelCard, ModelList
from app.tenancy.keys import KeyRecord
from app.tenancy.service import request_key
from engine.warm.model import WarmModel


def _card(model: WarmModel, name: str) -> ModelCard:
    info = model.model
    return ModelCard(
        id=name,
        created=info.created,
        owned_by="lilac",
        root=info.root,
        max_model_len=info.max_model_len,
        family=info.family,
        reasons_by_default=info.reasons_by_default,
        state=str(model.state),
    )


def _allowed(key: KeyRecord | None, name: str) -> bool:
    return key is None or key.limits.allows_model(name)


@get("/v1/models")
async def list_models(request: Request, models: ModelsDep) -> ModelList:
    """Every served model under each of its names, with its state (asleep or not); for
    a key limited to some models, only those."""
    key = request_key(request)
    cards = [
        _card(model, name)
        for model in models.models
        for name in model.model.served_names
        if _allowed(key, name)
    ]
    return ModelList(data=cards)


@get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, models: ModelsDep, model_id: str) -> ModelCard:
    """One served model by any of its names; 404 `model_not_found` for a name not served
    or one the key may not use (the same answer: a key learns nothing of other models)."""
    name = model_id.lstrip("/")
    model = models.get(name)
    if model is None or not _allowed(request_key(request), name):
        raise ModelNotFound(name)
    return _card(model, name)
