"""GET /v1/models and GET /v1/models/{id} (ids may contain `/`: `org/model`).

With the keys database shared by a fleet (app.tenancy.fleet.models), both answer for
the fleet: this replica's models, then those only other live replicas serve, so a
router that forwards the call to any one replica gets the fleet's list."""

from __future__ import annotations

from litestar import Request, get

from app.errors import ModelNotFound
from app.routes.deps import ModelsDep
from app.schemas.models import ModelCard, ModelList
from app.tenancy.fleet.models import model_card
from app.tenancy.keys.store import KeyRecord
from app.tenancy.service import request_key, request_tenancy


def _allowed(key: KeyRecord | None, name: str) -> bool:
    return key is None or key.limits.allows_model(name)


@get("/v1/models")
async def list_models(request: Request, models: ModelsDep) -> ModelList:
    """Every served model under each of its names, with its state (asleep or not); for
    a key limited to some models, only those. In a fleet, the other live replicas'
    models too (with the best state one of them has)."""
    key = request_key(request)
    cards = [
        model_card(model, name)
        for model in models.models
        for name in model.model.served_names
        if _allowed(key, name)
    ]
    fleet = request_tenancy(request).fleet
    if fleet is not None:
        cards += [
            card for card in fleet.cards() if models.get(card.id) is None and _allowed(key, card.id)
        ]
    return ModelList(data=cards)


@get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, models: ModelsDep, model_id: str) -> ModelCard:
    """One served model by any of its names (in a fleet, one another live replica
    serves); 404 `model_not_found` for a name not served or one the key may not use
    (the same answer: a key learns nothing of other models)."""
    name = model_id.lstrip("/")
    key = request_key(request)
    if not _allowed(key, name):
        raise ModelNotFound(name)
    model = models.get(name)
    if model is not None:
        return model_card(model, name)
    fleet = request_tenancy(request).fleet
    card = fleet.card(name) if fleet is not None else None
    if card is None:
        raise ModelNotFound(name)
    return card
