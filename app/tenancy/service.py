"""Tenancy as one object the app holds: the auth mode, the limiter, the key store and
the usage writer, and `begin`, which turns one generation request into a metered one
(its meter: app.tenancy.meter).

Only `--auth keys` uses the database: it meters every generation request and enforces
each key's limits. `none` and `static` touch no database and record no usage. Every
mode bounds each owner's open event streams (`follow`: app.tenancy.followers).
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import TypeAlias

from litestar import Request
from litestar.datastructures import State
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.engine import create_engine, default_url, sqlite_path
from app.errors import ModelNotFound, ModelNotHere, TooManyFollowers, TooManyRequests
from app.observability import context
from app.tenancy.consumes import Consumes
from app.tenancy.fleet.limits import SYNC_INTERVAL_S, FleetLimiter
from app.tenancy.fleet.models import HEARTBEAT_S, FleetModels
from app.tenancy.followers import Followers, FollowerSlot
from app.tenancy.keys.auth import OUTAGE_S, Authenticator, DatabaseKeys, StaticKeys
from app.tenancy.keys.store import KeyRecord, KeyStore
from app.tenancy.limits import Limiter, RateLimited, RateLimiter, Reservation
from app.tenancy.meter import RequestMeter, refusal_reason
from app.tenancy.prices.money import Price
from app.tenancy.prices.store import PriceStore
from app.tenancy.scope import ANONYMOUS_OWNER, SCOPE_KEY, SCOPE_TENANCY
from app.tenancy.usage.writer import UsageWriter

SPOOL_FILE = "usage-spool.jsonl"


class AuthConfigError(Exception):
    """The auth settings cannot start a server; the message says what to change."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_mode(settings: Settings) -> str:
    """The effective `--auth`: explicit, else `static` with `--api-key`, else `none` on a
    loopback address; anything else refuses to start."""
    if settings.auth is not None:
        if settings.auth not in ("none", "static", "keys"):
            raise AuthConfigError(f"--auth must be none, static or keys, not {settings.auth!r}")
        return settings.auth
    if settings.api_key or settings.api_key_file:
        return "static"
    if is_loopback(settings.host):
        return "none"
    raise AuthConfigError(
        f"refusing to serve on {settings.host} without API keys: anyone who reaches the "
        "port could use the model. Use --auth keys (see `lilac-serve keys create`), "
        "--api-key KEY, or --auth none to serve without keys anyway."
    )


def static_keys(settings: Settings) -> list[str]:
    keys = list(settings.api_key)
    if settings.api_key_file:
        try:
            text = Path(settings.api_key_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise AuthConfigError(f"--api-key-file: {exc}") from exc
        keys += [line.strip() for line in text.splitlines() if line.strip()]
    return keys


def database_url(settings: Settings) -> str:
    return settings.database_url or default_url(settings.data_dir)


def spool_path(settings: Settings) -> Path:
    path = sqlite_path(database_url(settings))
    folder = path.parent if path is not None else Path(settings.data_dir).expanduser()
    return folder / SPOOL_FILE


class Tenancy:
    def __init__(
        self,
        auth: Authenticator,
        *,
        store: KeyStore | None = None,
        writer: UsageWriter | None = None,
        limiter: RateLimiter | None = None,
        fleet: FleetModels | None = None,
        prices: PriceStore | None = None,
    ) -> None:
        self.auth = auth
        self.store = store
        self.writer = writer
        self.limiter: RateLimiter = limiter or Limiter()
        self.fleet = fleet  # the models of every replica sharing the keys database
        # The models' prices (with the keys database), the currency they are in, and the
        # `--price` seeds written at start for models without a price.
        self.prices = prices
        self.currency = "USD"
        self.price_seeds: list[Price] = []
        # The event streams each owner holds open here (its bound: `create_app` sets it).
        self.followers = Followers()

    @property
    def mode(self) -> str:
        return self.auth.mode

    @classmethod
    def from_settings(cls, settings: Settings, spool: Path | None = None) -> Tenancy:
        """`spool`: the usage spool file, when not the one beside the database (each of
        several frontend processes has its own)."""
        mode = auth_mode(settings)
        if mode == "none":
            return cls(Authenticator())
        if mode == "static":
            return cls(StaticKeys(static_keys(settings)))
        if not settings.limit_sync_interval_s > 0:
            raise AuthConfigError("--limit-sync-interval-s must be more than 0")
        return cls.with_database(
            create_engine(database_url(settings)),
            spool or spool_path(settings),
            outage_s=settings.key_cache_outage_s,
            limit_sync_s=settings.limit_sync_interval_s,
            fleet_heartbeat_s=settings.fleet_models_heartbeat_s,
        )

    @classmethod
    def with_database(
        cls,
        engine: AsyncEngine,
        spool: Path,
        outage_s: float = OUTAGE_S,
        limit_sync_s: float = SYNC_INTERVAL_S,
        fleet_heartbeat_s: float = HEARTBEAT_S,
    ) -> Tenancy:
        """Keys, usage and limits on `engine`. A key's limits hold across every replica
        sharing the database, PostgreSQL or a SQLite file on one host
        (app.tenancy.fleet.limits; one server alone is a fleet of one). With
        `fleet_heartbeat_s` over 0, the replicas on it publish their models to each
        other (app.tenancy.fleet.models)."""
        store = KeyStore(engine)
        auth = DatabaseKeys(store, outage_s=outage_s)
        limiter: RateLimiter = FleetLimiter.for_engine(engine, limit_sync_s)
        fleet = FleetModels(engine, interval_s=fleet_heartbeat_s) if fleet_heartbeat_s > 0 else None
        prices = PriceStore(engine)
        writer = UsageWriter(engine, spool, store, prices)
        return cls(auth, store=store, writer=writer, limiter=limiter, fleet=fleet, prices=prices)

    async def start(self) -> None:
        await self.limiter.start()
        if self.prices is not None:  # before any request: its row's cost needs the book
            await self.prices.start(self.price_seeds)
        if self.fleet is not None:
            await self.fleet.start()
        if self.writer is not None:
            self.writer.start()

    async def close(self) -> None:
        if self.fleet is not None:
            await self.fleet.close()  # the others stop listing this replica's models now
        await self.limiter.close()
        if self.prices is not None:
            await self.prices.close()
        if self.writer is not None:
            await self.writer.close()
            await self.writer.database.dispose()

    def refuse_if_elsewhere(self, key: KeyRecord | None, model: str | None) -> None:
        """429 `model_not_here` for a model this replica does not serve but a live peer
        does, so a router retries it on another replica; checked before the key's limits
        and admission, so the refusal costs the key nothing (no limit, no usage). A model
        the key may not use, or one nobody serves, is left to the 404 it gets today."""
        fleet = self.fleet
        # Most requests: no peer serves the model, asked first (a lookup in memory).
        if fleet is None or model is None or not fleet.served_elsewhere(model):
            return
        if fleet.here(model) or (key is not None and not key.limits.allows_model(model)):
            return
        record = context.current()
        if record is not None:
            record.model = model
        raise ModelNotHere(model)

    def admit_now(self, key: KeyRecord, consumes: Consumes) -> RequestMeter | None:
        """`admit` for a request that generates, without waiting, as most can (a plain
        call, no coroutine); None when the key's limits need a round with the other
        replicas first: then `await admit(...)`."""
        self._check_model(key, consumes.model)
        meter = RequestMeter(self, key, consumes.endpoint, consumes.model or "", consumes.n)
        try:
            reservation = self.limiter.admit_now(
                key.id, key.limits, consumes.tokens, consumes.slots
            )
        except RateLimited as exc:
            raise self._refused(key, exc) from exc
        if reservation is None:
            return None
        return self._admitted(meter, reservation)

    async def admit(self, key: KeyRecord, consumes: Consumes) -> RequestMeter | None:
        """The one admission of a keyed request: the key must allow `consumes.model`
        (else 404) and be within its limits (else 429, with Retry-After). A request that
        generates reserves its tokens and slots and gets its meter, which settles and
        bills it once; one that does not takes one request per minute and writes no
        usage row (None)."""
        self._check_model(key, consumes.model)
        if not consumes.generates:
            try:
                await self.limiter.acquire_request(key.id, key.limits)
            except RateLimited as exc:
                raise self._refused(key, exc) from exc
            return None
        model = consumes.model or ""
        meter = RequestMeter(self, key, consumes.endpoint, model, consumes.n)  # counts the wait
        try:
            reservation = await self.limiter.acquire(
                key.id, key.limits, consumes.tokens, consumes.slots
            )
        except RateLimited as exc:
            raise self._refused(key, exc) from exc
        return self._admitted(meter, reservation)

    def _check_model(self, key: KeyRecord, model: str | None) -> None:
        if model is not None and not key.limits.allows_model(model):
            if self.writer is not None:
                self.writer.refuse(key.id, "model_not_found", time.time())
            raise ModelNotFound(model)

    def _refused(self, key: KeyRecord, exc: RateLimited) -> TooManyRequests:
        """The 429 of a request over its key's limits, counted (per key, minute and
        reason; not a usage row)."""
        if self.writer is not None:
            self.writer.refuse(key.id, refusal_reason(exc), time.time())
        return TooManyRequests(exc.message, exc.retry_after_s, "rate_limit_exceeded")

    def follow(self, key: KeyRecord | None, consumes: Consumes) -> FollowerSlot:
        """The admission of an event stream held open (`consumes.follower`): one of its
        owner's follower slots, given back when the stream ends; past
        `--max-followers-per-key` a 429 `too_many_followers`, counted as the key's
        refusal. A keyless server's anonymous owner is one tenant. It takes none of the
        key's requests per minute: reading a stored response never has."""
        assert consumes.follower, consumes
        try:
            return self.followers.take(key.id if key is not None else ANONYMOUS_OWNER)
        except TooManyFollowers as exc:
            if key is not None and self.writer is not None:
                self.writer.refuse(key.id, exc.code or "too_many_followers", time.time())
            raise

    def _admitted(self, meter: RequestMeter, reservation: Reservation) -> RequestMeter:
        meter.reservation = reservation
        if self.writer is not None:  # its row will come: a group commit may wait for it
            self.writer.window.opened()
        return meter


# Litestar's `user` and `auth` are never set here (the key travels under SCOPE_KEY), so
# nothing is known, or read, of them.
HttpRequest: TypeAlias = Request[object, object, State]


def request_tenancy(request: HttpRequest) -> Tenancy:
    """The app's tenancy (app.tenancy.middleware puts it in every request's scope)."""
    tenancy: Tenancy = request.scope[SCOPE_TENANCY]  # type: ignore[literal-required]  # ASGI scope is a TypedDict
    return tenancy


def request_key(request: HttpRequest) -> KeyRecord | None:
    """The authenticated key of a request (None without auth)."""
    key: KeyRecord | None = request.scope.get(SCOPE_KEY)  # type: ignore[assignment]  # ASGI scope is a TypedDict
    return key
