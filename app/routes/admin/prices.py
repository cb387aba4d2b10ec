"""Operator routes of the models' prices: GET /admin/prices (the prices in force,
`?all=true` every change) and PUT /admin/prices/{model} (a price from now, or from
`effective_from`), behind the admin key. They need `--auth keys`: prices live in the
keys database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request, Router, get, put

from app.errors import InvalidRequest, ModelNotFound
from app.routes.admin.admission import AdminKeyGuard
from app.routes.deps import ModelsDep, TenancyDep
from app.schemas.prices import PriceChange
from app.tenancy.prices.money import micros, public
from app.tenancy.prices.store import PriceStore
from app.tenancy.report import parse_time
from app.tenancy.service import Tenancy
from engine.warm.pool import ModelPool


def _store(tenancy: Tenancy) -> PriceStore:
    if tenancy.prices is None:
        raise InvalidRequest("Prices are kept only with --auth keys.", code="auth_mode")
    return tenancy.prices


def _micros(value: Decimal, param: str) -> int:
    try:
        return micros(value)
    except ValueError as exc:
        raise InvalidRequest(f"`{param}`: {exc}", param=param) from None


def _served(name: str, models: ModelPool, tenancy: Tenancy) -> None:
    """A price is for a model this server, or a live replica beside it, serves."""
    fleet = tenancy.fleet
    if models.get(name) is None and (fleet is None or fleet.card(name) is None):
        raise ModelNotFound(name)


def _effective_from(value: str | float | None) -> float | None:
    try:
        return parse_time(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="effective_from") from None


@get("/")
async def list_prices(tenancy: TenancyDep, all: bool = False) -> dict[str, Any]:
    store = _store(tenancy)
    rows = (await store.reload()).all() if all else list(store.current().values())
    rows.sort(key=lambda p: (p.model, p.effective_from))
    data = [public(price, tenancy.currency) for price in rows]
    return {"object": "list", "currency": tenancy.currency, "data": data}


@put("/{model_id:path}")
async def set_price(
    request: Request[Any, Any, Any], tenancy: TenancyDep, models: ModelsDep, model_id: str
) -> dict[str, Any]:
    """The model's price per million tokens from `effective_from` (default now); this
    replica charges it at once, the others within seconds."""
    store = _store(tenancy)
    name = model_id.lstrip("/")
    _served(name, models, tenancy)
    change = msgspec.json.decode(await request.body() or b"{}", type=PriceChange)
    input_micros = _micros(change.input, "input")
    cached = change.cached_input if change.cached_input is not None else change.input
    if not 0 <= change.batch_discount <= 100:
        raise InvalidRequest("`batch_discount` is a percent from 0 to 100.", param="batch_discount")
    price = await store.set_price(
        name,
        input_micros,
        _micros(cached, "cached_input"),
        _micros(change.output, "output"),
        change.batch_discount,
        _effective_from(change.effective_from),
    )
    return public(price, tenancy.currency)


def admin_prices_router(admin_key: str | None) -> Router:
    return Router(
        path="/admin/prices",
        route_handlers=[list_prices, set_price],
        guards=[AdminKeyGuard(admin_key)],
    )
