"""GET /v1/models."""

from __future__ import annotations

from litestar import Request, get

from app.routes.deps import EngineDep
from app.schemas.models import ModelCard, ModelList
from app.tenancy.service import request_key


@get("/v1/models")
async def list_models(request: Request, engine: EngineDep) -> ModelList:
    """The served models; for a key limited to some models, only those."""
    info = engine.model
    key = request_key(request)
    names = info.served_names
    if key is not None:
        names = tuple(name for name in names if key.limits.allows_model(name))
    return ModelList(
        data=[
            ModelCard(
                id=name,
                created=info.created,
                owned_by="lilac",
                root=info.root,
                max_model_len=info.max_model_len,
                family=info.family,
                reasons_by_default=info.reasons_by_default,
            )
            for name in names
        ]
    )
