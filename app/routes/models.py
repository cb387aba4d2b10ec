"""GET /v1/models."""

from __future__ import annotations

from litestar import Request, get

from app.schemas.models import ModelCard, ModelList
from engine.protocol import ModelInfo


@get("/v1/models")
async def list_models(request: Request) -> ModelList:
    info: ModelInfo = request.app.state.engine.model
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
