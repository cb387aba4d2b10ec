"""API keys: making them, and the store that keeps their hashes and limits.

A key is `lilac-sk-` followed by 43 URL-safe characters (32 random bytes, 256 bits).
The database keeps its SHA-256 and a short id, never the key: a high-entropy secret
needs no slow, salted hash, and a plain digest lets the key be found by one indexed
lookup. The key is shown once, when it is made.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import api_keys
from app.schemas.json import JsonObject

# The keys' last use, one row of parameters per key (executemany).
_TOUCH = (
    update(api_keys)
    .where(api_keys.c.id == bindparam("touched_id"))
    .values(last_used_at=bindparam("touched_at"))
)

PREFIX = "lilac-sk-"
_SHAPE = re.compile(r"lilac-sk-[A-Za-z0-9_-]{43}")
DEFAULT_RPM = 200
DEFAULT_WEIGHT = 1.0
MAX_WEIGHT = 1000.0  # a key's weight is > 0 and at most this
CACHE_GROUP_CHARS = 64  # the api_keys.cache_group column


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def well_formed(token: str) -> bool:
    return _SHAPE.fullmatch(token) is not None


def hash_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits; None: unlimited. `priority` is the best (lowest) admission
    priority its requests may ask for; `weight` scales its share of the engine against
    other busy keys (2: about twice the service of a key of weight 1), not a tier."""

    rpm: int | None = DEFAULT_RPM
    tpm: int | None = None
    max_concurrent: int | None = None
    priority: int = 0
    models: tuple[str, ...] | None = None  # served names it may use; None: all
    weight: float = DEFAULT_WEIGHT

    def allows_model(self, name: str) -> bool:
        return self.models is None or name in self.models


class LimitChanges(TypedDict, total=False):
    """Some of a key's `KeyLimits`, to change (`KeyStore.update`)."""

    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    priority: int
    models: tuple[str, ...] | None
    weight: float


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    name: str
    created_at: float
    limits: KeyLimits = field(default_factory=KeyLimits)
    last_used_at: float | None = None
    revoked_at: float | None = None
    # Keys of one group may share the engine's prefix cache; None: the key's own.
    cache_group: str | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def public(self) -> JsonObject:
        """What `keys list` and GET /admin/keys show (never the hash)."""
        limits = self.limits
        return {
            "id": self.id,
            "name": self.name,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "revoked_at": self.revoked_at,
            "rpm": limits.rpm,
            "tpm": limits.tpm,
            "max_concurrent": limits.max_concurrent,
            "priority": limits.priority,
            "weight": limits.weight,
            "models": list(limits.models) if limits.models is not None else None,
            "cache_group": self.cache_group,
        }


class KeyNotFound(Exception):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"no key with id {key_id!r}")
        self.key_id = key_id


def check_weight(weight: float) -> float:
    """`weight` if a key may have it (> 0, at most MAX_WEIGHT), else ValueError."""
    if not 0 < weight <= MAX_WEIGHT:  # NaN fails too
        raise ValueError(f"a key's weight is > 0 and at most {MAX_WEIGHT:g}, not {weight}")
    return weight


def _row_values(limits: KeyLimits) -> dict[str, Any]:
    return {
        "rpm": limits.rpm,
        "tpm": limits.tpm,
        "max_concurrent": limits.max_concurrent,
        "priority": limits.priority,
        "weight": check_weight(limits.weight),
        "models": json.dumps(list(limits.models)) if limits.models is not None else None,
    }


def _record(row: Any) -> KeyRecord:
    models = json.loads(row.models) if row.models is not None else None
    return KeyRecord(
        id=row.id,
        name=row.name,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        cache_group=row.cache_group,
        limits=KeyLimits(
            rpm=row.rpm,
            tpm=row.tpm,
            max_concurrent=row.max_concurrent,
            priority=row.priority,
            models=tuple(models) if models is not None else None,
            weight=float(row.weight),
        ),
    )


class KeyStore:
    """Keys in the database. Every method is one short transaction."""

    def __init__(self, database: AsyncEngine) -> None:
        self.database = database

    async def create(
        self, name: str, limits: KeyLimits, cache_group: str | None = None
    ) -> tuple[KeyRecord, str]:
        """A new key: its record, and the secret (shown once, never stored)."""
        secret = new_secret()
        record = KeyRecord(
            id="key_" + secrets.token_hex(6),
            name=name,
            created_at=time.time(),
            limits=limits,
            cache_group=cache_group,
        )
        async with self.database.begin() as conn:
            await conn.execute(
                insert(api_keys).values(
                    id=record.id,
                    name=name,
                    key_hash=hash_key(secret),
                    created_at=record.created_at,
                    cache_group=cache_group,
                    **_row_values(limits),
                )
            )
        return record, secret

    async def list(self) -> list[KeyRecord]:
        async with self.database.connect() as conn:
            rows = await conn.execute(select(api_keys).order_by(api_keys.c.created_at))
            return [_record(row) for row in rows]

    async def get(self, key_id: str) -> KeyRecord:
        async with self.database.connect() as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).first()
        if row is None:
            raise KeyNotFound(key_id)
        return _record(row)

    async def by_hash(self, key_hash: str) -> KeyRecord | None:
        return (await self.by_hashes([key_hash])).get(key_hash)

    async def by_hashes(self, key_hashes: Sequence[str]) -> dict[str, KeyRecord]:
        """The records of the keys with these hashes, by hash, in one query (a hash no
        key has is left out)."""
        async with self.database.connect() as conn:
            statement = select(api_keys).where(api_keys.c.key_hash.in_(key_hashes))
            rows = (await conn.execute(statement)).all()
        return {row.key_hash: _record(row) for row in rows}

    async def revoke(self, key_id: str) -> KeyRecord:
        record = await self.get(key_id)
        if record.revoked:
            return record
        revoked_at = time.time()
        async with self.database.begin() as conn:
            await conn.execute(
                update(api_keys).where(api_keys.c.id == key_id).values(revoked_at=revoked_at)
            )
        return replace(record, revoked_at=revoked_at)

    async def update(self, key_id: str, changes: LimitChanges, **group: str | None) -> KeyRecord:
        """Change some limits (`KeyLimits` field names) of a key, and its cache group
        when `cache_group=` is given (None clears it)."""
        record = await self.get(key_id)
        limits = replace(record.limits, **changes)
        cache_group = group.get("cache_group", record.cache_group)
        async with self.database.begin() as conn:
            await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id)
                .values(cache_group=cache_group, **_row_values(limits))
            )
        return replace(record, limits=limits, cache_group=cache_group)

    async def touch(self, last_used: dict[str, float]) -> None:
        """Record when keys were last used (batched by the usage writer): one statement
        for all of them, run by the driver once per key (a thousand tenants are one
        round trip to the database's thread or server, not a thousand)."""
        if not last_used:
            return
        rows = [{"touched_id": key_id, "touched_at": when} for key_id, when in last_used.items()]
        async with self.database.begin() as conn:
            await conn.execute(_TOUCH, rows)
