"""`--price MODEL=IN/CACHED/OUT`: a price to write at start for a model that has none
(units of the currency per million tokens, e.g. `kimi-k2.6=0.70/0.20/3.50`)."""

from __future__ import annotations

from collections.abc import Iterable

from app.tenancy.prices.money import Price, micros
from app.tenancy.prices.store import check_model


def parse_seed(text: str, at: float = 0.0) -> Price:
    """One `--price` value as the price it sets from `at`; a ValueError says what is wrong."""
    # A model name may hold `/` (org/model): the price is what follows the last `=`.
    model, sep, amounts = text.rpartition("=")
    parts = amounts.split("/")
    if not sep or len(parts) != 3:
        raise ValueError(f"--price {text!r}: expected MODEL=IN/CACHED/OUT, e.g. m=0.70/0.20/3.50")
    try:
        input_micros, cached, output = (micros(part) for part in parts)
        return Price(check_model(model.strip()), input_micros, cached, output, effective_from=at)
    except ValueError as exc:
        raise ValueError(f"--price {text!r}: {exc}") from None


def parse_seeds(texts: Iterable[str], at: float = 0.0) -> list[Price]:
    return [parse_seed(text, at) for text in texts]
