"""Tenants apart in the real engine's prefix cache (`--auth keys`, a real SQLite keys
database): after key A sends a ~900-token memo, key B sending the same text gets no
cached tokens (with or without a `cache_salt` of its own), A sending it again gets its
cache hit, and keys of one cache group share theirs. Without keys the same text twice
is a cache hit: the prompt is long enough for the cache to show."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.config.settings import Settings
from app.db.engine import open_database
from app.main import create_app
from app.tenancy.keys.auth import DatabaseKeys
from app.tenancy.keys.isolation import cache_salt
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.service import Tenancy
from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.vllm_backend.engine import VLLMEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import GroupedKeys

URL = "/v1/chat/completions"


def memo() -> str:
    """About 900 tokens no other test sends (a fresh tag: no earlier cache entry)."""
    tag = uuid.uuid4().hex[:8]
    lines = [
        f"Line {i} of confidential memo {tag}: the quarterly figure for region {i % 7} "
        f"is {i * 37 % 101} units."
        for i in range(40)
    ]
    return "\n".join(lines)


def body(text: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    return {"model": DEFAULT_MODEL_NAME, "messages": messages, "max_tokens": 1, **extra}


@pytest.fixture
async def keyed(
    real_engine: VLLMEngine, tmp_path: Path
) -> AsyncIterator[tuple[AppClient, dict[str, str], dict[str, KeyRecord]]]:
    database = await open_database(f"sqlite:///{tmp_path}/lilac.db")
    tenancy = Tenancy.with_database(database, tmp_path / "spool.jsonl")
    assert tenancy.store is not None and isinstance(tenancy.auth, DatabaseKeys)
    secrets, records = {}, {}
    for name in ("a", "b", "c", "d"):
        record, secret = await tenancy.store.create(name, KeyLimits(rpm=None))
        secrets[name], records[name] = secret, record
    tenancy.auth = GroupedKeys(tenancy.auth, {records["c"].id: "team", records["d"].id: "team"})
    app = create_app(Settings(admin_key="admin", auth="keys"), engine=real_engine, tenancy=tenancy)
    async with AppClient(app, timeout=120) as http:
        yield http, secrets, records
    assert tenancy.writer is not None
    await tenancy.writer.close()
    await database.dispose()


async def cached(http: AppClient, secret: str | None, text: str, **extra: Any) -> int:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    response = await http.post(URL, json=body(text, **extra), headers=headers)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] > 800
    return int(usage["prompt_tokens_details"]["cached_tokens"])


async def test_one_key_cannot_see_anothers_prompts_in_cached_tokens(
    keyed: tuple[AppClient, dict[str, str], dict[str, KeyRecord]],
) -> None:
    http, secrets, records = keyed
    text = memo()
    assert await cached(http, secrets["a"], text) == 0
    assert await cached(http, secrets["b"], text) == 0  # the same text, another key
    assert await cached(http, secrets["a"], text) >= 512  # a's own cache still serves a
    # No salt b sends reaches a's part of the cache, however it guesses.
    a = records["a"]
    for guess in (a.id, f"key:{a.id}", cache_salt(a, None)):
        assert await cached(http, secrets["b"], text, cache_salt=guess) == 0
    # A client salt narrows a key's own scope: a fresh one is a miss, then a hit.
    assert await cached(http, secrets["a"], text, cache_salt="project-1") == 0
    assert await cached(http, secrets["a"], text, cache_salt="project-1") >= 512


async def test_keys_of_one_cache_group_share_their_cache(
    keyed: tuple[AppClient, dict[str, str], dict[str, KeyRecord]],
) -> None:
    http, secrets, _ = keyed
    text = memo()
    assert await cached(http, secrets["c"], text) == 0
    assert await cached(http, secrets["d"], text) >= 512  # same group: shared
    assert await cached(http, secrets["a"], text) == 0  # outside the group: not


async def test_without_keys_the_same_text_is_a_cache_hit(real_client: AppClient) -> None:
    text = memo()
    assert await cached(real_client, None, text) == 0
    assert await cached(real_client, None, text) >= 512
    assert await cached(real_client, None, text, cache_salt="other") == 0
