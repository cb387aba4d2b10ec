"""GET /v1/models and GET /v1/models/{id} (ids may contain `/`: `org/model`).

With the keys database shared by a fleet (app.tenancy.fleet.models), both answer for
the fleet: this replica's models, then those only other live replicas serve, so a
router that forwards the call to any one replica gets the fleet's list.

Each card of a model with a price in force (with `--auth keys`) has `pricing`: the price
of one token in units of the currency, as decimal strings (OpenRouter's shape); a model
without a price has none."""

from __future__ import annotations

import msgspec
from litestar import Request, get

from app.errors import ModelNotFound
from app.routes.deps import ModelsDep
from app.schemas.models import ModelCard, ModelList
from app.schemas.prices import ModelPricing
from app.tenancy.fleet.models import model_card
from app.tenancy.keys.store import KeyRecord
from app.tenancy.prices.money import Price, per_token
from app.tenancy.service import Tenancy, request_key, request_tenancy


def _allowed(key: KeyRecord | None, name: str) -> bool:
    return key is None or key.limits.allows_model(name)


def pricing(price: Price) -> ModelPricing:
    return ModelPricing(
        prompt=per_token(price.input_micros),
        completion=per_token(price.output_micros),
        input_cache_read=per_token(price.cached_input_micros),
    )


def _priced(cards: list[ModelCard], tenancy: Tenancy) -> list[ModelCard]:
    """The cards with the price in force now of each model that has one."""
    current = tenancy.prices.current() if tenancy.prices is not None else {}
    if not current:
        return cards
    return [
        msgspec.structs.replace(card, pricing=pricing(current[card.id]))
        if card.id in current
        else card
        for card in cards
    ]


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
    tenancy = request_tenancy(request)
    if tenancy.fleet is not None:
        cards += [
            card
            for card in tenancy.fleet.cards()
            if models.get(card.id) is None and _allowed(key, card.id)
        ]
    return ModelList(data=_priced(cards, tenancy))


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
    tenancy = request_tenancy(request)
    if model is not None:
        return _priced([model_card(model, name)], tenancy)[0]
    card = tenancy.fleet.card(name) if tenancy.fleet is not None else None
    if card is None:
        raise ModelNotFound(name)
    return _priced([card], tenancy)[0]
