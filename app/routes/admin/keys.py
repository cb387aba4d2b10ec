"""Operator routes of the tenants: /admin/keys (create, list, update, revoke) and
/admin/usage (the usage report), behind the admin key. They need `--auth keys`."""

from __future__ import annotations

from typing import Annotated, Any, cast

import msgspec
from litestar import Request, Router, delete, get, patch, post

from app.errors import InvalidRequest, KeyNotFoundError
from app.routes.admin.admission import AdminKeyGuard
from app.routes.deps import TenancyDep
from app.tenancy.keys.store import (
    CACHE_GROUP_CHARS,
    MAX_WEIGHT,
    KeyLimits,
    KeyNotFound,
    KeyStore,
    LimitChanges,
)
from app.tenancy.report import parse_time as parse_report_time
from app.tenancy.report import refusal_reasons, summarize
from app.tenancy.service import Tenancy

# A key's share of the engine against other busy keys (its limits' `weight`).
Weight = Annotated[float, msgspec.Meta(gt=0, le=MAX_WEIGHT)]
_LIMITS = ("rpm", "tpm", "max_concurrent", "priority", "weight", "models")


class KeyChanges(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Limits of a new key, or the ones to change (absent: unchanged; null: unlimited)."""

    name: str | msgspec.UnsetType = msgspec.UNSET
    rpm: int | msgspec.UnsetType | None = msgspec.UNSET
    tpm: int | msgspec.UnsetType | None = msgspec.UNSET
    max_concurrent: int | msgspec.UnsetType | None = msgspec.UNSET
    priority: int | msgspec.UnsetType = msgspec.UNSET
    weight: Weight | msgspec.UnsetType = msgspec.UNSET
    models: list[str] | msgspec.UnsetType | None = msgspec.UNSET
    # Keys of one group may share the prefix cache (null: the key's own).
    cache_group: str | msgspec.UnsetType | None = msgspec.UNSET

    def group(self) -> dict[str, str | None]:
        """`{"cache_group": ...}` when it was sent, else nothing (unchanged)."""
        if self.cache_group is msgspec.UNSET:
            return {}
        if self.cache_group is not None and not 0 < len(self.cache_group) <= CACHE_GROUP_CHARS:
            raise InvalidRequest(
                f"`cache_group` must be 1 to {CACHE_GROUP_CHARS} characters or null.",
                param="cache_group",
            )
        return {"cache_group": self.cache_group}

    def limits(self) -> LimitChanges:
        changes = {f: getattr(self, f) for f in _LIMITS if getattr(self, f) is not msgspec.UNSET}
        if changes.get("models") is not None:
            changes["models"] = tuple(changes["models"])
        for field in ("rpm", "tpm", "max_concurrent"):
            value = changes.get(field)
            if value is not None and value < 0:
                raise InvalidRequest(f"`{field}` must be >= 0 or null.", param=field)
        # The fields this body decoded as, by the `KeyLimits` names they share.
        return cast(LimitChanges, changes)


def _store(tenancy: Tenancy) -> KeyStore:
    if tenancy.store is None:
        raise InvalidRequest("Keys are managed only with --auth keys.", code="auth_mode")
    return tenancy.store


def _changes(raw: bytes) -> KeyChanges:
    return msgspec.json.decode(raw or b"{}", type=KeyChanges)


@get("/keys")
async def list_keys(tenancy: TenancyDep) -> dict[str, Any]:
    store = _store(tenancy)
    return {"object": "list", "data": [k.public() for k in await store.list()]}


@post("/keys", status_code=201)
async def create_key(request: Request[Any, Any, Any], tenancy: TenancyDep) -> dict[str, Any]:
    """The new key's record and, once, its secret (`key`)."""
    store = _store(tenancy)
    changes = _changes(await request.body())
    if not isinstance(changes.name, str) or not changes.name.strip():
        raise InvalidRequest("A key needs a non-empty `name`.", param="name")
    limits = KeyLimits(**changes.limits())
    record, secret = await store.create(changes.name, limits, **changes.group())
    return {**record.public(), "key": secret}


async def _change(
    request: Request[Any, Any, Any], tenancy: Tenancy, key_id: str, revoke: bool
) -> dict[str, Any]:
    store = _store(tenancy)
    try:
        if revoke:
            record = await store.revoke(key_id)
        else:
            changes = _changes(await request.body())
            record = await store.update(key_id, changes.limits(), **changes.group())
    except KeyNotFound as exc:
        raise KeyNotFoundError(str(exc), param="id", code="key_not_found") from exc
    tenancy.auth.forget(key_id)  # this replica at once; the others within a second
    return record.public()


@patch("/keys/{key_id:str}")
async def update_key(
    request: Request[Any, Any, Any], tenancy: TenancyDep, key_id: str
) -> dict[str, Any]:
    return await _change(request, tenancy, key_id, revoke=False)


@delete("/keys/{key_id:str}", status_code=200)
async def revoke_key(
    request: Request[Any, Any, Any], tenancy: TenancyDep, key_id: str
) -> dict[str, Any]:
    return await _change(request, tenancy, key_id, revoke=True)


@get("/usage")
async def usage_report(
    tenancy: TenancyDep,
    by: str = "key",
    since: str | None = None,
    until: str | None = None,
) -> dict[str, Any]:
    _store(tenancy)
    assert tenancy.writer is not None
    try:
        start, end = parse_report_time(since), parse_report_time(until)
        rows = await summarize(tenancy.writer.database, by, start, end, tenancy.currency)
        reasons = await refusal_reasons(tenancy.writer.database, start, end)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    return {
        "object": "list",
        "by": by,
        "currency": tenancy.currency,
        "data": rows,
        "refusals": reasons,
    }


def admin_keys_router(admin_key: str | None) -> Router:
    return Router(
        path="/admin",
        route_handlers=[list_keys, create_key, update_key, revoke_key, usage_report],
        guards=[AdminKeyGuard(admin_key)],
    )
