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

from app.tenancy.keys import KeyRecord


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
    scope = cache_scope(key)
    if client_salt is None:  # most requests: one digest per scope, kept
        salt = _scope_salts.get(scope)
        if salt is None:
            if len(_scope_salts) >= MAX_SCOPE_SALTS:
                _scope_salts.clear()
            salt = _scope_salts[scope] = _digest(scope, None)
        return salt
    return _digest(scope, client_salt)


# The salt of each scope without a client's salt. A scope is a key's or a group's, of
# authenticated keys only: bounded by the keys that exist, and cleared past this size.
MAX_SCOPE_SALTS = 10_000
_scope_salts: dict[str, str] = {}


def _digest(scope: str, client_salt: str | None) -> str:
    return hashlib.sha256(json.dumps([scope, client_salt]).encode()).hexdigest()
