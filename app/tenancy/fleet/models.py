"""The fleet's models: what every replica sharing the keys database serves.

Each replica publishes one row per served name (its card, and whether the model is
awake) in `fleet_models`, renewed every `interval_s` by a heartbeat task, and deleted
when it stops cleanly. A row not renewed within `ttl_s` (three heartbeats) belongs to
a replica gone without saying so: it is ignored, and the next heartbeat of any replica
prunes it. Both SQLite (replicas on one host) and PostgreSQL work.

The same heartbeat reads the other replicas' live rows into an in-memory snapshot,
which is all the request path reads (`served_elsewhere`, `awake_elsewhere`, `cards`):
no database round trip per request. A snapshot entry carries its own expiry, so a
replica that cannot reach the database forgets its peers once their rows would have
expired, and then answers as a server alone does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec
from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import fleet_models
from app.schemas.models import ModelCard
from app.schemas.prices import TopProvider
from app.tasks import cancel_and_wait
from engine.ticks import sleep_to_tick
from engine.warm.model import ModelState, WarmModel
from engine.warm.pool import ModelPool

log = logging.getLogger("lilac.fleet")

HEARTBEAT_S = 2.0
BEATS_TO_EXPIRE = 3  # a row not renewed for this many heartbeats is a replica gone

_STATE_RANK = {"awake": 3, "waking": 2, "asleep": 1, "loading": 0}
_decode_card = msgspec.json.Decoder(ModelCard).decode
_encode = msgspec.json.Encoder().encode


def model_card(model: WarmModel, name: str) -> ModelCard:
    """A served model's card under one of its names, as `GET /v1/models` lists it."""
    info = model.model
    return ModelCard(
        id=name,
        created=info.created,
        owned_by="lilac",
        root=info.root,
        max_model_len=info.max_model_len,
        family=info.family,
        reasons_by_default=info.reasons_by_default,
        state=str(model.state),
        context_length=info.max_model_len,
        # No bound of its own on the output: a request may generate up to the context.
        top_provider=TopProvider(max_completion_tokens=info.max_model_len),
    )


@dataclass(slots=True)
class PeerModel:
    """One model as the other live replicas serve it: the card with the best state
    among them, until when one of them serves it, and until when one has it awake."""

    card: ModelCard
    expires_at: float
    awake_until: float = 0.0


def merge(rows: Iterable[tuple[str, bool, str, float]]) -> dict[str, PeerModel]:
    """The snapshot from (model, awake, card JSON, expires_at) rows of other replicas."""
    peers: dict[str, PeerModel] = {}
    for name, awake, card_json, expires_at in rows:
        try:
            card = _decode_card(card_json)
        except msgspec.DecodeError:
            continue  # a row some other version wrote: not ours to read
        entry = peers.get(name)
        if entry is None:
            entry = peers[name] = PeerModel(card, expires_at)
        elif _STATE_RANK.get(card.state or "", 0) > _STATE_RANK.get(entry.card.state or "", 0):
            entry.card = card
        entry.expires_at = max(entry.expires_at, expires_at)
        if awake:
            entry.awake_until = max(entry.awake_until, expires_at)
    return peers


class FleetModels:
    """This replica's rows in `fleet_models`, and the snapshot of everyone else's."""

    def __init__(
        self,
        database: AsyncEngine,
        *,
        interval_s: float = HEARTBEAT_S,
        replica_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = database
        self.interval_s = interval_s
        self.ttl_s = BEATS_TO_EXPIRE * interval_s
        self.replica_id = replica_id or uuid.uuid4().hex
        self._clock = clock
        self._pool: ModelPool | None = None
        self._peers: dict[str, PeerModel] = {}
        self._task: asyncio.Task[None] | None = None
        # One beat at a time: two of one replica's beats at once would both delete its
        # rows, then both insert them (a duplicate key for the second).
        self._beating = asyncio.Lock()
        self._failing = False
        self.beats = 0

    def serve(self, pool: ModelPool) -> None:
        """The models this replica serves and publishes; with `prefer_awake_elsewhere`,
        the pool then asks the published states whether another replica has a sleeping
        model awake."""
        self._pool = pool
        pool.awake_elsewhere = self.published_awake

    def here(self, name: str) -> bool:
        return self._pool is not None and self._pool.get(name) is not None

    # -- the request path (memory only) -------------------------------------------------

    def served_elsewhere(self, name: str) -> bool:
        """A live peer serves `name`."""
        entry = self._peers.get(name)
        return entry is not None and entry.expires_at > self._clock()

    def awake_elsewhere(self, name: str) -> bool:
        """A live peer has `name` awake (as of its last heartbeat)."""
        entry = self._peers.get(name)
        return entry is not None and entry.awake_until > self._clock()

    def published_awake(self, name: str) -> bool | None:
        """`awake_elsewhere`, or None while no live peer is known (a replica alone, or one
        whose peers do not share its database, cannot tell)."""
        now = self._clock()
        if not any(entry.expires_at > now for entry in self._peers.values()):
            return None
        return self.awake_elsewhere(name)

    def cards(self) -> list[ModelCard]:
        """The live peers' models, one card each (the best state among them)."""
        now = self._clock()
        return [entry.card for entry in self._peers.values() if entry.expires_at > now]

    def card(self, name: str) -> ModelCard | None:
        entry = self._peers.get(name)
        return entry.card if entry is not None and entry.expires_at > self._clock() else None

    # -- the heartbeat -------------------------------------------------------------------

    def _own_rows(self, expires_at: float) -> list[dict[str, object]]:
        rows = []
        for model in self._pool.models if self._pool is not None else ():
            for name in model.model.served_names:
                rows.append(
                    {
                        "replica_id": self.replica_id,
                        "model": name,
                        "awake": model.state is ModelState.AWAKE,
                        "card": _encode(model_card(model, name)).decode(),
                        "expires_at": expires_at,
                    }
                )
        return rows

    async def beat(self) -> None:
        """Renew this replica's rows, prune expired ones, and read the live peers' into
        the snapshot. Raises what the database raises."""
        async with self._beating:
            await self._beat()

    async def _beat(self) -> None:
        now = self._clock()
        rows = self._own_rows(now + self.ttl_s)
        mine = fleet_models.c.replica_id == self.replica_id
        async with self.database.begin() as conn:
            await conn.execute(delete(fleet_models).where(mine))
            await conn.execute(delete(fleet_models).where(fleet_models.c.expires_at <= now))
            if rows:
                await conn.execute(insert(fleet_models), rows)
            result = await conn.execute(
                select(
                    fleet_models.c.model,
                    fleet_models.c.awake,
                    fleet_models.c.card,
                    fleet_models.c.expires_at,
                ).where(fleet_models.c.replica_id != self.replica_id)
            )
            peers = merge((r[0], bool(r[1]), r[2], float(r[3])) for r in result)
        self._peers = peers
        self.beats += 1

    async def leave(self) -> None:
        """This replica stops: its rows go, so the others stop listing its models now."""
        async with self.database.begin() as conn:
            await conn.execute(
                delete(fleet_models).where(fleet_models.c.replica_id == self.replica_id)
            )

    async def start(self) -> None:
        """The first heartbeat now (a replica lists the fleet from its first request),
        then one every `interval_s`."""
        await self._beat_logged()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fleet-models")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(max(1.0, self.interval_s)):
                await self.leave()

    async def _run(self) -> None:
        while True:
            await sleep_to_tick(self.interval_s)  # on the grid of the periodic work
            await self._beat_logged()

    async def _beat_logged(self) -> None:
        try:
            async with asyncio.timeout(max(1.0, self.interval_s)):
                await self.beat()
        except Exception as exc:  # the database is down or slow: peers expire on their own
            if not self._failing:
                log.warning(
                    "fleet models: the shared database failed (%s); the other replicas' "
                    "models drop out within %.0f s unless it answers",
                    type(exc).__name__,
                    self.ttl_s,
                )
            self._failing = True
            return
        if self._failing:
            log.warning("fleet models: the shared database answers again")
        self._failing = False
