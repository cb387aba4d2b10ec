"""GET /v1/models."""

from __future__ import annotations

from litestar import get

from app.routes.deps import EngineDep
from app.schemas.models import ModelCard, ModelList


@get("/v1/models")
async def list_models(engine: EngineDep) -> ModelList:
    info = engine.model
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
            for name in info.served_names
        ]
    )
