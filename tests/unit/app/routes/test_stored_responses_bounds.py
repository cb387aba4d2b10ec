"""The store's bounds through POST /v1/responses (scripted engine, a real SQLite file):
a chain at its length is refused before the model runs, a response too large to store is
a 400 and stored nowhere, `store: false` keeps nothing, and another key can neither
read nor continue a chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from engine.scripted import ScriptedEngine
from tests.client import AppClient, provided
from tests.unit.app.routes.test_stored_responses import sdk, two_keys

ASK: dict[str, Any] = {"model": "scripted", "max_output_tokens": 4}


def app_with(tmp_path: Path, engine: ScriptedEngine, **settings: Any) -> AppClient:
    config = Settings(auth="none", data_dir=str(tmp_path / "data"), **settings)
    return AppClient(create_app(config, engine=engine), timeout=10)


async def test_a_chain_at_its_length_is_refused_before_the_model_runs(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    async with app_with(tmp_path, engine, max_response_chain=3) as http:
        client = sdk(http, "unused")
        previous = None
        for turn in range(3):
            made = await client.responses.create(
                input=f"turn {turn}", previous_response_id=previous, **ASK
            )
            previous = made.id
        runs = len(engine.requests)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(input="turn 3", previous_response_id=previous, **ASK)
        assert len(engine.requests) == runs  # refused before generating
        await provided(http.app, "response_store").database.close()
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "response_chain_too_long"
    assert error["param"] == "previous_response_id" and "at most 3" in error["message"]


async def test_a_response_too_large_to_store_is_a_400_and_stored_nowhere(tmp_path: Path) -> None:
    async with app_with(tmp_path, ScriptedEngine(), max_stored_response_bytes=2048) as http:
        client = sdk(http, "unused")
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(input="x " * 2000, **ASK)
        small = await client.responses.create(input="hi", **ASK)
        kept = await client.responses.retrieve(small.id)
        await provided(http.app, "response_store").database.close()
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "stored_response_too_large"
    assert kept.id == small.id


async def test_store_false_keeps_nothing(tmp_path: Path) -> None:
    async with app_with(tmp_path, ScriptedEngine()) as http:
        client = sdk(http, "unused")
        made = await client.responses.create(input="hi", store=False, **ASK)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(input="more", previous_response_id=made.id, **ASK)
    assert not (tmp_path / "data" / "lilac.db").exists()


async def test_another_key_cannot_continue_a_chain(database: AsyncEngine, tmp_path: Path) -> None:
    async with two_keys(database, tmp_path) as (http, _, (_, a_secret), (_, b_secret)):
        alice, bob = sdk(http, a_secret), sdk(http, b_secret)
        first = await alice.responses.create(input="hi", **ASK)
        second = await alice.responses.create(input="more", previous_response_id=first.id, **ASK)
        with pytest.raises(openai.NotFoundError) as refused:
            await bob.responses.create(input="mine?", previous_response_id=second.id, **ASK)
        third = await alice.responses.create(input="on", previous_response_id=second.id, **ASK)
    assert refused.value.code == "response_not_found"
    assert third.previous_response_id == second.id
