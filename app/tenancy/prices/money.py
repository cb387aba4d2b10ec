"""Money as integers: prices are micro-units of the server's currency per million
tokens (1 unit = 1,000,000 micro-units, so $0.70 per million tokens is 700000), and a
row's cost is micro-units, rounded once, half up, with integer arithmetic only.

A request's cost: its uncached prompt tokens at the input price, its cached prompt
tokens at the cached-input price and its completion tokens (reasoning included) at
the output price, summed, less the batch discount for batch work, then rounded."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

MICROS = 1_000_000  # micro-units in one unit of the currency
PER_TOKENS = 1_000_000  # prices are per this many tokens
PERCENT = 100
DEFAULT_BATCH_DISCOUNT = 50  # percent, as OpenAI discounts batches
MAX_MICROS = 10**15  # a billion units per million tokens: past any real price


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price per million tokens, in micro-units, from `effective_from` on."""

    model: str
    input_micros: int
    cached_input_micros: int
    output_micros: int
    batch_discount: int = DEFAULT_BATCH_DISCOUNT
    effective_from: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input_micros", "cached_input_micros", "output_micros"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= MAX_MICROS:
                raise ValueError(f"{name} must be a whole number of micro-units, 0 or more")
        if not isinstance(self.batch_discount, int) or not 0 <= self.batch_discount <= PERCENT:
            raise ValueError("batch_discount must be a whole percent from 0 to 100")


def cost_micros(price: Price | None, prompt: int, cached: int, completion: int, batch: bool) -> int:
    """The cost of the tokens at `price`, in micro-units (0 without a price). The
    products are summed whole and divided once, so no part is rounded on its own."""
    if price is None:
        return 0
    cached = min(max(cached, 0), prompt)
    numerator = (
        (prompt - cached) * price.input_micros
        + cached * price.cached_input_micros
        + completion * price.output_micros
    )
    share = PERCENT - price.batch_discount if batch else PERCENT
    denominator = PER_TOKENS * PERCENT
    return (numerator * share + denominator // 2) // denominator


def micros(amount: str | Decimal) -> int:
    """Units of the currency (`"0.70"`) as micro-units (700000), exactly; an amount
    finer than a micro-unit, negative or not a number is a ValueError."""
    try:
        value = Decimal(str(amount).strip())
    except InvalidOperation:
        raise ValueError(f"not an amount: {amount!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"an amount is a number, 0 or more, not {amount!r}")
    scaled = value * MICROS
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{amount!r} is finer than a millionth of the currency")
    return int(scaled)


def units(micro: int) -> str:
    """Micro-units as units of the currency, with six places: 1830 -> `0.001830`."""
    return f"{Decimal(micro).scaleb(-6):.6f}"


def per_token(micros_per_million: int) -> str:
    """A price per million tokens as the price of one token in units, without a
    trailing zero: 700000 -> `0.0000007` (OpenRouter's `pricing` strings)."""
    value = Decimal(micros_per_million).scaleb(-12)
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def public(price: Price, currency: str) -> dict[str, Any]:
    """A price as the CLI and the admin API show it: units per million tokens (six
    places), micro-units too."""
    return {
        "model": price.model,
        "currency": currency,
        "input": units(price.input_micros),
        "cached_input": units(price.cached_input_micros),
        "output": units(price.output_micros),
        "input_micros": price.input_micros,
        "cached_input_micros": price.cached_input_micros,
        "output_micros": price.output_micros,
        "batch_discount": price.batch_discount,
        "effective_from": price.effective_from,
    }
