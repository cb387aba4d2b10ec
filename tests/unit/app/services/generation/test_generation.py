"""Every engine request of a keyed request carries its key's weight (the engine's fair
scheduler shares the engine by it): chat, streamed or not, each prompt of a legacy
completion, the Responses and Messages APIs; a request without a key carries 1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.engine import open_database
from app.main import create_app
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import URL, bearer, chat, keyed_app, new_key


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = await open_database(f"sqlite:///{tmp_path}/lilac.db")
    yield engine
    await engine.dispose()


async def test_a_keyed_requests_engine_requests_carry_the_keys_weight(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        _, heavy = await new_key(tenancy, weight=3.0)
        _, plain = await new_key(tenancy)
        anthropic = {"x-api-key": heavy, "anthropic-version": "2023-06-01"}
        calls = [
            (URL, chat(), bearer(heavy)),
            (URL, chat(stream=True), bearer(heavy)),
            ("/v1/completions", {"model": "scripted", "prompt": ["a", "b"]}, bearer(heavy)),
            ("/v1/responses", {"model": "scripted", "input": "hi"}, bearer(heavy)),
            ("/v1/messages", {**chat(), "max_tokens": 8}, anthropic),
        ]
        for path, body, headers in calls:
            response = await http.post(path, json=body, headers=headers)
            assert response.status_code == 200, (path, response.text)
        assert len(engine.requests) == 6  # the completion's two prompts run one each
        assert [request.weight for request in engine.requests] == [3.0] * 6
        assert (await http.post(URL, json=chat(), headers=bearer(plain))).status_code == 200
        assert engine.requests[-1].weight == 1.0


async def test_a_request_without_a_key_carries_weight_one() -> None:
    engine = ScriptedEngine()
    async with AppClient(create_app(Settings(), engine=engine), timeout=10) as http:
        assert (await http.post(URL, json=chat())).status_code == 200
    assert [request.weight for request in engine.requests] == [1.0]
