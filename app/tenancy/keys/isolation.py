"""What keeps tenants apart inside the one engine they share: the prefix cache salt.

vLLM reuses a cached prompt block only for a request with the same `cache_salt`, and
reports the reused tokens in `cached_tokens` (and they show in latency). Unsalted, one
key could learn what another key's prompts began with. With keys, every request is
salted with its key (or its key's `cache_group`: the keys of a group share), and a
client's own `cache_salt` only narrows that scope further: it is hashed together with
the key's, so no value a client sends reaches another key's cache.
"""

from __future__ import annotations

import hashlib
import json

from app.tenancy.keys.store import KeyRecord


def cache_scope(key: KeyRecord) -> str:
    """The part of the prefix cache a key's requests may reuse."""
    if key.cache_group:
        return "group:" + key.cache_group
    return "key:" + key.id


def cache_salt(key: KeyRecord | None, client_salt: str | None) -> str | None:
    """The engine's salt for a request: without a metered key, the client's own (or
    none); with one, a digest of the key's scope and the client's salt (JSON: no two
    pairs encode alike)."""
    if key is None:
        return client_salt
    if client_salt is None:  # most requests: one digest per key, kept
        kept = _key_salts.get(key.id)
        if kept is not None and kept[0] == key.cache_group:
            return kept[1]
        if len(_key_salts) >= MAX_KEY_SALTS:
            _key_salts.clear()
        salt = _digest(cache_scope(key), None)
        _key_salts[key.id] = (key.cache_group, salt)
        return salt
    return _digest(cache_scope(key), client_salt)


# Each key's salt without a client's salt, with the cache group it was made for (a key
# moved to another group gets a new one). Of authenticated keys only: bounded by the
# keys that exist, and cleared past this size.
MAX_KEY_SALTS = 10_000
_key_salts: dict[str, tuple[str | None, str]] = {}


def _digest(scope: str, client_salt: str | None) -> str:
    return hashlib.sha256(json.dumps([scope, client_salt]).encode()).hexdigest()
