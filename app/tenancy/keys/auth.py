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
  Known keys are read again together: the first request to find its key's record
  stale reads it along with every other key asked for since its own last read, in one
  query (`REFRESH_BATCH` keys a query, each batch answered as it comes), so that the
  keys in use go stale together and many tenants cost a read each second, not a read
  per key each second.
  A key in steady use is read again before its record expires: the first request past
  `READ_AHEAD` of the TTL starts that shared read and is answered from the cache, so
  no request waits for the database while its record is read (a request whose record
  did expire waits for the read, as it always did; none is answered from a record
  older than the TTL).
  The digest of an `Authorization` header seen before is remembered (a client sends the
  same one every time), so a cached key costs no SHA-256.
  When the database cannot be read, a key it confirmed less than `outage_s` ago keeps
  working from the cache (a revocation made meanwhile takes effect when it is back);
  past that, and for any key not cached, the answer is a 503 (it may be valid).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from app.errors import InvalidKey, KeyStoreUnavailable
from app.tenancy.keys.cache import LruMap
from app.tenancy.keys.store import KeyLimits, KeyRecord, KeyStore, hash_key, well_formed

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
# Keys read again in one query, at most (its parameters stay well within SQLite's and
# PostgreSQL's limits).
REFRESH_BATCH = 500
# The share of the TTL after which a request of a key in use starts its next read
# without waiting for it: a read that takes less than the rest of the TTL (a quarter
# second) is never waited for by a key in steady use.
READ_AHEAD = 0.75


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
    in_use: bool = False  # asked for since then: read again with the next stale key
    # When a read of it last began: a read ahead starts only when none has since the
    # record was fetched (one whose read failed is not asked again until it expires).
    asked_at: float = 0.0


@dataclass(slots=True)
class _Answers:
    """What one read of the database says of its keys: each digest's record (None: no
    such key), or nothing for a digest it could not answer (`error` says why)."""

    records: dict[str, KeyRecord | None]
    error: str = ""


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
        self._ahead_s = ttl_s * READ_AHEAD
        self._known: LruMap[_Known] = LruMap(max_known)
        self._unknown: LruMap[float] = LruMap(max_unknown)  # digest -> when it was asked
        self._pending: dict[str, asyncio.Task[_Answers]] = {}  # digest -> its read
        self._in_use: list[str] = []  # known keys asked for since their last read
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
        if known is not None and (age := now - known.fetched_at) < self._ttl_s:
            if not known.in_use:  # its first request since its last read
                known.in_use = True
                self._in_use.append(digest)
            if age >= self._ahead_s and known.asked_at <= known.fetched_at:
                self._read(self._stale_with_keys_in_use(digest, now), now)  # not awaited
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
            # A key never seen is read alone: a flood of random keys must not take the
            # known ones along to the database with each of its keys.
            self._read([digest] if unknown else self._stale_with_keys_in_use(digest, now), now)
            task = self._pending[digest]
        answers = await asyncio.shield(task)
        if digest not in answers.records:
            raise KeyStoreUnavailable(answers.error)
        return answers.records[digest]

    def _stale_with_keys_in_use(self, stale: str, now: float) -> list[str]:
        """`stale` and every known key asked for since its last read (and not being read
        already), each noted as asked `now`: read together, they go stale together."""
        in_use, self._in_use = self._in_use, []
        digests = [stale]
        known = self._known.get(stale)
        if known is not None:
            known.asked_at = now
        for digest in in_use:
            known = self._known.get(digest)
            if known is None:
                continue
            known.in_use = False  # marked again by its next request after this read
            if digest != stale and digest not in self._pending:
                known.asked_at = now
                digests.append(digest)
        return digests

    def _read(self, digests: list[str], now: float) -> None:
        """Read `digests` again, `REFRESH_BATCH` a query, one query after the other:
        each batch a task of its own, so that a request waits for its own key's batch
        only (the stale key that asked is in the first), and a client leaving does not
        cancel the others' read."""
        previous: asyncio.Task[_Answers] | None = None
        for start in range(0, len(digests), REFRESH_BATCH):
            batch = digests[start : start + REFRESH_BATCH]
            task = asyncio.ensure_future(self._fetch(batch, now, after=previous))
            for digest in batch:
                self._pending[digest] = task
            task.add_done_callback(functools.partial(self._finished, batch))
            previous = task

    def _finished(self, digests: list[str], task: asyncio.Task[_Answers]) -> None:
        for digest in digests:
            if self._pending.get(digest) is task:
                del self._pending[digest]
        if not task.cancelled():
            task.exception()  # retrieved: nobody may be left waiting on it

    async def _fetch(
        self, digests: list[str], now: float, after: asyncio.Task[_Answers] | None = None
    ) -> _Answers:
        if after is not None:  # the batch before: one query at a time on the pool
            await asyncio.wait([after])
        try:
            found = await self._query(digests)
        except Exception as exc:
            return self._during_outage(digests, now, exc)
        records: dict[str, KeyRecord | None] = {}
        for digest in digests:
            record = records[digest] = found.get(digest)
            if record is None:
                self._known.pop(digest)
                self._unknown.put(digest, now)
            else:
                self._unknown.pop(digest)
                self._known.put(digest, _Known(record, fetched_at=now, confirmed_at=now))
        return _Answers(records)

    async def _query(self, digests: list[str]) -> dict[str, KeyRecord]:
        try:
            return await self._store.by_hashes(digests)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            # A pooled connection died with a database that has since restarted: the
            # pool is emptied, so one more try gets a fresh connection.
            return await self._store.by_hashes(digests)

    def _during_outage(self, digests: list[str], now: float, exc: Exception) -> _Answers:
        """The keys the database confirmed less than `outage_s` ago, trusted from the
        cache (asked again after the TTL, not on every request); the others get no
        answer."""
        records: dict[str, KeyRecord | None] = {}
        oldest = 0.0
        for digest in digests:
            known = self._known.get(digest)
            if known is None or now - known.confirmed_at >= self._outage_s:
                continue
            known.fetched_at = now
            records[digest] = known.record
            oldest = max(oldest, now - known.confirmed_at)
        if records:
            log.warning(
                "keys database unreachable (%s): trusting %d cached key(s), confirmed at "
                "most %.0f s ago",
                exc,
                len(records),
                oldest,
            )
        return _Answers(records, error=str(exc))

    def forget(self, key_id: str | None = None) -> None:
        if key_id is None:
            self._known.clear()
            self._unknown.clear()
            return
        for digest, known in self._known.items():
            if known.record.id == key_id:
                self._known.pop(digest)
