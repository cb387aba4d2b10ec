"""Who is calling: the `Authorization: Bearer` key, checked by the auth mode.

- `none`: everyone is anonymous (no key is checked).
- `static`: the keys given at start (`--api-key`, `--api-key-file`), compared in constant
  time (each candidate's digest against every configured digest).
- `keys`: the keys database. A key's record is cached for at most `TTL_S`, so a
  revocation (or a change of limits) made anywhere reaches every replica sharing the
  database within that time. A key the database does not know is remembered as unknown
  for `UNKNOWN_TTL_S` (a secret is random and shown only once it exists, so no client
  can hold a key before it is made): a flood of random well-formed keys costs one query
  per distinct key, and concurrent lookups of one key share one query. Both caches are
  bounded, least recently used first out.
  The digest of an `Authorization` header seen before is remembered (a client sends the
  same one every time), so a cached key costs no SHA-256.
  When the database cannot be read, a key it confirmed less than `outage_s` ago keeps
  working from the cache (a revocation made meanwhile takes effect when it is back);
  past that, and for any key not cached, the answer is a 503 (it may be valid).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from app.errors import InvalidKey, KeyStoreUnavailable
from app.tenancy.key_cache import LruMap
from app.tenancy.keys import KeyLimits, KeyRecord, KeyStore, hash_key, well_formed

log = logging.getLogger("lilac.auth")

TTL_S = 1.0
UNKNOWN_TTL_S = 60.0
OUTAGE_S = 300.0  # the default of --key-cache-outage-s
MAX_KNOWN = 100_000
# About 250 bytes an entry: the memory a flood of random keys can take is bounded.
MAX_UNKNOWN = 100_000
# The digests of the `Authorization` headers seen last: a client sends the same header
# on every request, and its SHA-256 is most of what a cached key's check costs. Only
# well-formed keys' headers (a few dozen bytes) are kept; when full, the map starts
# over (each entry is recomputed on its next request, no query is made).
MAX_DIGESTS = 10_000
MAX_DIGEST_HEADER = 128  # bytes: `Bearer ` and a key, with room for stray spaces


def bearer_token(header: bytes | None) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None when there is none that is
    printable ASCII (an empty, non-ASCII or other-scheme header is no key)."""
    if not header:
        return None
    try:
        text = header.decode("ascii")
    except UnicodeDecodeError:
        return None
    scheme, _, token = text.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or not token.isprintable():
        return None
    return token


class Authenticator:
    mode: str = "none"

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        """The caller's key record (None in mode `none`); raises `InvalidKey`."""
        return None

    def forget(self, key_id: str | None = None) -> None:
        """Drop cached records (after this process changed a key)."""


class StaticKeys(Authenticator):
    mode = "static"

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("--auth static needs at least one --api-key or --api-key-file")
        self._digests = [(hash_key(key), f"static-{i}") for i, key in enumerate(keys)]
        # Static keys are the operator's own: no limits.
        self._limits = KeyLimits(rpm=None)

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        token = bearer_token(header)
        if token is None:
            raise InvalidKey
        digest = hash_key(token)
        found = None
        for candidate, key_id in self._digests:  # no early exit: constant time
            if hmac.compare_digest(candidate, digest):
                found = key_id
        if found is None:
            raise InvalidKey
        return KeyRecord(id=found, name=found, created_at=0.0, limits=self._limits)


@dataclass(slots=True)
class _Known:
    record: KeyRecord
    fetched_at: float  # the database was last asked (or tried) then
    confirmed_at: float  # the database last answered for this key then


class DatabaseKeys(Authenticator):
    mode = "keys"

    def __init__(
        self,
        store: KeyStore,
        clock: Callable[[], float] = time.monotonic,
        *,
        ttl_s: float = TTL_S,
        unknown_ttl_s: float = UNKNOWN_TTL_S,
        outage_s: float = OUTAGE_S,
        max_known: int = MAX_KNOWN,
        max_unknown: int = MAX_UNKNOWN,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl_s = ttl_s
        self._unknown_ttl_s = unknown_ttl_s
        self._outage_s = outage_s
        self._known: LruMap[_Known] = LruMap(max_known)
        self._unknown: LruMap[float] = LruMap(max_unknown)  # digest -> when it was asked
        self._pending: dict[str, asyncio.Task[KeyRecord | None]] = {}
        self._digests: dict[bytes, str] = {}  # Authorization header -> its key's digest

    @property
    def cached(self) -> tuple[int, int]:
        """How many keys are cached: (known, unknown)."""
        return len(self._known), len(self._unknown)

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        # Most requests: a header seen before, of a key read within the TTL, answered
        # here without a call; the rest take `_digest` and `_lookup`.
        digest = self._digests.get(header) if header is not None else None
        if digest is None:
            digest = self._digest(header)
        now = self._clock()
        known = self._known.get(digest)
        if known is not None and now - known.fetched_at < self._ttl_s:
            record: KeyRecord | None = known.record
        else:
            record = await self._lookup(digest, known is None, now)
        if record is None or record.revoked:
            raise InvalidKey
        return record

    def _digest(self, header: bytes | None) -> str:
        """The digest of a header not seen before (remembered); raises `InvalidKey` when
        it holds no key."""
        token = bearer_token(header)
        if token is None or not well_formed(token):
            raise InvalidKey
        digest = hash_key(token)
        if header is not None and len(header) <= MAX_DIGEST_HEADER:
            if len(self._digests) >= MAX_DIGESTS:
                self._digests.clear()
            self._digests[header] = digest
        return digest

    async def _lookup(self, digest: str, unknown: bool, now: float) -> KeyRecord | None:
        """A key not read within the TTL (`unknown`: not cached at all)."""
        if unknown:
            asked = self._unknown.get(digest)
            if asked is not None and now - asked < self._unknown_ttl_s:
                return None
        task = self._pending.get(digest)
        if task is None:
            # One query per key however many requests wait on it; a task of its own so
            # that a client leaving does not cancel the others' lookup.
            task = asyncio.ensure_future(self._fetch(digest, now))
            self._pending[digest] = task
            task.add_done_callback(lambda done: self._finished(digest, done))
        return await asyncio.shield(task)

    def _finished(self, digest: str, task: asyncio.Task[KeyRecord | None]) -> None:
        self._pending.pop(digest, None)
        if not task.cancelled():
            task.exception()  # retrieved: nobody may be left waiting on it

    async def _fetch(self, digest: str, now: float) -> KeyRecord | None:
        try:
            record = await self._query(digest)
        except Exception as exc:
            return self._during_outage(digest, now, exc)
        if record is None:
            self._known.pop(digest)
            self._unknown.put(digest, now)
        else:
            self._unknown.pop(digest)
            self._known.put(digest, _Known(record, fetched_at=now, confirmed_at=now))
        return record

    async def _query(self, digest: str) -> KeyRecord | None:
        try:
            return await self._store.by_hash(digest)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            # A pooled connection died with a database that has since restarted: the
            # pool is emptied, so one more try gets a fresh connection.
            return await self._store.by_hash(digest)

    def _during_outage(self, digest: str, now: float, exc: Exception) -> KeyRecord:
        known = self._known.get(digest)
        if known is None or now - known.confirmed_at >= self._outage_s:
            raise KeyStoreUnavailable(str(exc)) from exc
        known.fetched_at = now  # ask again after the TTL, not on every request
        log.warning(
            "keys database unreachable (%s): trusting cached key %s, confirmed %.0f s ago",
            exc,
            known.record.id,
            now - known.confirmed_at,
        )
        return known.record

    def forget(self, key_id: str | None = None) -> None:
        if key_id is None:
            self._known.clear()
            self._unknown.clear()
            return
        for digest, known in self._known.items():
            if known.record.id == key_id:
                self._known.pop(digest)
