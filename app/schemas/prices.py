"""Wire types of the models' prices: `PUT /admin/prices/{model}` and what `GET
/v1/models` shows of a price on each model card (OpenRouter's shape)."""

from __future__ import annotations

from decimal import Decimal

from msgspec import Struct


class PriceChange(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A model's price per million tokens, in units of the server's currency (a JSON
    number or a decimal string, kept exactly); `cached_input` defaults to `input`;
    `effective_from`: an ISO time or Unix seconds (default now)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    batch_discount: int = 50
    effective_from: str | float | None = None


class ModelPricing(Struct, omit_defaults=True):
    """The price of one token, in units of the currency, as decimal strings."""

    prompt: str
    completion: str
    input_cache_read: str


class TopProvider(Struct, omit_defaults=True):
    """The most one request may have the model generate."""

    max_completion_tokens: int
