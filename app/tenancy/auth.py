"""Who is calling: the `Authorization: Bearer` key, checked by the auth mode.

- `none`: everyone is anonymous (no key is checked).
- `static`: the keys given at start (`--api-key`, `--api-key-file`), compared in constant
  time (each candidate's digest against every configured digest).
- `keys`: the keys database. A key's record is cached for at most `TTL_S`, so a
  revocation (or a change of limits) made anywhere reaches every replica sharing the
  database within that time. When the database cannot be read, a key known before keeps
  working from the cache; an unknown key gets a 503 (it may be valid) until it is back.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable

from app.tenancy.keys import KeyLimits, KeyRecord, KeyStore, hash_key, well_formed

log = logging.getLogger("lilac.auth")

TTL_S = 1.0
MAX_CACHED = 100_000  # bounds memory against clients sending random keys


class InvalidKey(Exception):
    """Missing, malformed, unknown or revoked: the client gets one message for all."""


class KeyStoreUnavailable(Exception):
    pass


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


class DatabaseKeys(Authenticator):
    mode = "keys"

    def __init__(self, store: KeyStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._cache: dict[str, tuple[KeyRecord | None, float]] = {}

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        token = bearer_token(header)
        if token is None or not well_formed(token):
            raise InvalidKey
        digest = hash_key(token)
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[1] < TTL_S:
            record = cached[0]
        else:
            record = await self._lookup(digest, cached, now)
        if record is None or record.revoked:
            raise InvalidKey
        return record

    async def _lookup(
        self, digest: str, cached: tuple[KeyRecord | None, float] | None, now: float
    ) -> KeyRecord | None:
        try:
            record = await self._store.by_hash(digest)
        except Exception as exc:
            if cached is not None and cached[0] is not None:
                log.warning("keys database unreachable (%s): using the cached key", exc)
                return cached[0]
            raise KeyStoreUnavailable(str(exc)) from exc
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[digest] = (record, now)
        return record

    def forget(self, key_id: str | None = None) -> None:
        if key_id is None:
            self._cache.clear()
            return
        for digest, (record, _) in list(self._cache.items()):
            if record is not None and record.id == key_id:
                del self._cache[digest]
