"""GET /v1/models."""

from __future__ import annotations

from litestar import Request, get

from app.routes.deps import ModelsDep
from app.schemas.models import ModelCard, ModelList
from app.tenancy.service import request_key


@get("/v1/models")
async def list_models(request: Request, models: ModelsDep) -> ModelList:
    """Every served model under each of its names, with its state (asleep or not); for
    a key limited to some models, only those."""
    key = request_key(request)
    cards = []
    for model in models.models:
        info = model.model
        for name in info.served_names:
            if key is not None and not key.limits.allows_model(name):
                continue
            cards.append(
                ModelCard(
                    id=name,
                    created=info.created,
                    owned_by="lilac",
                    root=info.root,
                    max_model_len=info.max_model_len,
                    family=info.family,
                    reasons_by_default=info.reasons_by_default,
                    state=str(model.state),
                )
            )
    return ModelList(data=cards)
