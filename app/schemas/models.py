"""Wire types of GET /v1/models."""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, Struct, UnsetType

from app.schemas.prices import ModelPricing, TopProvider


class ModelCard(Struct):
    id: str
    created: int
    owned_by: str
    root: str
    max_model_len: int
    family: str | None = None  # the model family it is bound to (engine.families)
    reasons_by_default: bool = False  # thinks unless the request turns reasoning off
    # `loading`, `awake`, `waking` or `asleep`: a request for a sleeping model wakes it.
    state: str | None = None
    object: Literal["model"] = "model"
    # OpenRouter's fields: the context window, the most one request may generate and,
    # for a model with a price, the price of one token (left out without one).
    context_length: int | None = None
    top_provider: TopProvider | None = None
    pricing: ModelPricing | UnsetType = UNSET


class ModelList(Struct):
    data: list[ModelCard]
    object: Literal["list"] = "list"
