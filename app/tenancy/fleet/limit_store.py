"""The fleet's shared rate-limit state in the keys database (PostgreSQL, or a SQLite
file the replicas of one host share): one row per key (the requests and tokens buckets
every replica draws from), one per replica (its heartbeat) and one per key and replica
(the concurrency slots it holds).

A replica talks to it in rounds (`exchange`): one transaction that renews its
heartbeat, counts the live replicas, and for each key it asks about refills the key's
buckets, grants or takes back units and sets the slots it holds. On PostgreSQL the
key's row is locked for the round (`FOR UPDATE`, in key order so rounds never
deadlock); on SQLite the round's first statement (the heartbeat, a write) takes the
file's one write lock for the whole transaction. Either way two replicas never grant
the same unit or slot.

The tables are made by the first replica that needs them: they hold counters that
live a minute, not records (UNLOGGED on PostgreSQL: a crash empties them, which
refills every bucket, as restarting a single server does).

Times are the replicas' clocks (seconds since the epoch). A bucket's stamp only moves
forward, so a replica whose clock runs ahead refills a bucket early at most once, by
its lead times the rate, and a replica behind it refills nothing until it catches up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlalchemy import BindParameter, bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

WINDOW_S = 60.0  # the limits are per minute
SCHEMA_LOCK_ID = 0x6C696C6164  # any fixed number: replicas creating the tables take turns
# A replica gone this long has its slots row deleted (its slots already stopped
# counting when its heartbeat expired).
FORGET_S = 300.0

_SCHEMA = (
    "CREATE {unlogged} TABLE IF NOT EXISTS lilac_limit_buckets ("
    " key_id text PRIMARY KEY, requests double precision, tokens double precision,"
    " stamp double precision NOT NULL)",
    "CREATE {unlogged} TABLE IF NOT EXISTS lilac_limit_replicas ("
    " replica_id text PRIMARY KEY, expires_at double precision NOT NULL)",
    "CREATE {unlogged} TABLE IF NOT EXISTS lilac_limit_slots ("
    " key_id text NOT NULL, replica_id text NOT NULL, slots integer NOT NULL,"
    " PRIMARY KEY (key_id, replica_id))",
)
_KEYS: BindParameter[list[str]] = bindparam("keys", expanding=True)


@dataclass(slots=True)
class Ask:
    """One key's part of a round. `requests` and `tokens`: units wanted from the key's
    bucket (negative: given back); `slots`: the concurrency slots the replica wants to
    hold, at least `slots_floor` (those in flight) whatever the others hold."""

    key_id: str
    rpm: int | None
    tpm: int | None
    max_concurrent: int | None
    requests: float = 0.0
    tokens: float = 0.0
    slots: int = 0
    slots_floor: int = 0


@dataclass(slots=True)
class Grant:
    """What a round gave one key: units (negative when given back), the slots now held,
    and the buckets' levels left in the store."""

    requests: float = 0.0
    tokens: float = 0.0
    slots: int = 0
    requests_left: float = 0.0
    tokens_left: float = 0.0


@dataclass(slots=True)
class Round:
    replicas: int
    grants: dict[str, Grant] = field(default_factory=dict)


def _refill(level: float | None, capacity: int | None, elapsed: float) -> float:
    if capacity is None:
        return 0.0
    if level is None:  # a new row: the bucket starts full, as a single server's does
        return float(capacity)
    return min(float(capacity), level + max(0.0, elapsed) * capacity / WINDOW_S)


def _draw(level: float, capacity: int | None, want: float) -> tuple[float, float]:
    """(granted, level after): a positive want takes what the bucket has; a negative one
    gives units back, up to the bucket's capacity."""
    if capacity is None:
        return 0.0, level
    if want >= 0:
        granted = min(want, max(level, 0.0))
        return granted, level - granted
    return want, min(float(capacity), level - want)


class LimitStore:
    def __init__(self, engine: AsyncEngine, replica_id: str) -> None:
        self.engine = engine
        self.replica_id = replica_id
        self._schema_ready = False
        self._postgresql = engine.dialect.name == "postgresql"

    async def _ensure_schema(self, conn: AsyncConnection) -> None:
        if self._postgresql:  # SQLite's write lock already makes replicas take turns
            await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": SCHEMA_LOCK_ID})
        unlogged = "UNLOGGED" if self._postgresql else ""
        for statement in _SCHEMA:
            await conn.execute(text(statement.format(unlogged=unlogged)))

    async def exchange(self, now: float, ttl_s: float, asks: list[Ask]) -> Round:
        """One round; raises whatever the database raises (the caller falls back)."""
        async with self.engine.begin() as conn:
            # Writes first (the tables, the heartbeat): on SQLite the first takes the
            # write lock for the whole round (a read first would have to upgrade its
            # lock, which fails at once when another replica holds it).
            if not self._schema_ready:
                await self._ensure_schema(conn)
            replicas = await self._heartbeat(conn, now, ttl_s)
            result = Round(replicas)
            if asks:
                ordered = sorted(asks, key=lambda a: a.key_id)
                result.grants = await self._grant(conn, now, ordered)
        self._schema_ready = True
        return result

    async def leave(self) -> None:
        """This replica stops: its slots and heartbeat go, so the others count without it."""
        async with self.engine.begin() as conn:
            params = {"me": self.replica_id}
            await conn.execute(text("DELETE FROM lilac_limit_slots WHERE replica_id = :me"), params)
            await conn.execute(
                text("DELETE FROM lilac_limit_replicas WHERE replica_id = :me"), params
            )

    async def _heartbeat(self, conn: AsyncConnection, now: float, ttl_s: float) -> int:
        await conn.execute(
            text(
                "INSERT INTO lilac_limit_replicas (replica_id, expires_at) VALUES (:me, :exp) "
                "ON CONFLICT (replica_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
            ),
            {"me": self.replica_id, "exp": now + ttl_s},
        )
        await conn.execute(
            text(
                "DELETE FROM lilac_limit_slots WHERE replica_id IN "
                "(SELECT replica_id FROM lilac_limit_replicas WHERE expires_at < :old)"
            ),
            {"old": now - FORGET_S},
        )
        count = await conn.scalar(
            text("SELECT count(*) FROM lilac_limit_replicas WHERE expires_at > :now"),
            {"now": now},
        )
        return max(1, int(count or 0))

    async def _grant(self, conn: AsyncConnection, now: float, asks: list[Ask]) -> dict[str, Grant]:
        keys = [a.key_id for a in asks]
        await conn.execute(
            text(
                "INSERT INTO lilac_limit_buckets (key_id, stamp) VALUES (:k, :now) "
                "ON CONFLICT (key_id) DO NOTHING"
            ),
            [{"k": key, "now": now} for key in keys],
        )
        lock = " FOR UPDATE" if self._postgresql else ""
        rows = await conn.execute(
            text(
                "SELECT key_id, requests, tokens, stamp FROM lilac_limit_buckets "
                f"WHERE key_id IN :keys ORDER BY key_id{lock}"
            ).bindparams(_KEYS),
            {"keys": keys},
        )
        buckets = {row[0]: (row[1], row[2], row[3]) for row in rows}
        others = await conn.execute(
            text(
                "SELECT s.key_id, sum(s.slots) FROM lilac_limit_slots s "
                "JOIN lilac_limit_replicas r ON r.replica_id = s.replica_id "
                "WHERE s.key_id IN :keys AND s.replica_id <> :me "
                "AND r.expires_at > :now GROUP BY s.key_id"
            ).bindparams(_KEYS),
            {"keys": keys, "me": self.replica_id, "now": now},
        )
        held_elsewhere = {row[0]: int(row[1]) for row in others}
        grants: dict[str, Grant] = {}
        updates: list[dict[str, object]] = []
        holds: list[dict[str, object]] = []
        for ask in asks:
            requests, tokens, stamp = buckets[ask.key_id]
            elsewhere = held_elsewhere.get(ask.key_id, 0)
            grant = _settle_ask(ask, requests, tokens, now - stamp, elsewhere)
            grants[ask.key_id] = grant
            updates.append(
                {
                    "k": ask.key_id,
                    "r": grant.requests_left if ask.rpm is not None else None,
                    "t": grant.tokens_left if ask.tpm is not None else None,
                    "s": max(stamp, now),
                }
            )
            if ask.max_concurrent is not None:
                holds.append({"k": ask.key_id, "me": self.replica_id, "n": grant.slots})
        await conn.execute(
            text(
                "UPDATE lilac_limit_buckets SET requests = :r, tokens = :t, stamp = :s "
                "WHERE key_id = :k"
            ),
            updates,
        )
        if holds:
            await conn.execute(
                text(
                    "INSERT INTO lilac_limit_slots (key_id, replica_id, slots) "
                    "VALUES (:k, :me, :n) "
                    "ON CONFLICT (key_id, replica_id) DO UPDATE SET slots = EXCLUDED.slots"
                ),
                holds,
            )
        return grants


def _settle_ask(
    ask: Ask, requests: float | None, tokens: float | None, elapsed: float, elsewhere: int
) -> Grant:
    grant = Grant()
    level = _refill(requests, ask.rpm, elapsed)
    grant.requests, grant.requests_left = _draw(level, ask.rpm, ask.requests)
    level = _refill(tokens, ask.tpm, elapsed)
    grant.tokens, grant.tokens_left = _draw(level, ask.tpm, ask.tokens)
    if ask.max_concurrent is not None:
        free = max(0, ask.max_concurrent - elsewhere)
        grant.slots = max(ask.slots_floor, min(ask.slots, free))
    return grant


def share(limit: int, replicas: int) -> int:
    """A replica's part of a limit when it counts alone: the limit over the replicas it
    last saw, at least one (a limit of 0 stays 0)."""
    if limit <= 0:
        return 0
    return max(1, math.floor(limit / max(1, replicas)))
