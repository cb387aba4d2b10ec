"""Two replicas on one real keys database (SQLite file and PostgreSQL), `alpha` on one
and `beta` on the other, each over the scripted engine: each lists the fleet's models
in OpenAI's shape (what the openai client reads), filtered by what the caller's key may
use; a request for the peer's model is refused fast with a retryable 429 that costs the
key nothing; a model nobody serves stays a 404."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.tenancy.fleet.models import FleetModels
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from engine.warm.model import WarmConfig
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, new_key, refusal_counts, usage_rows

URL = "/v1/chat/completions"


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@asynccontextmanager
async def replica(
    database: AsyncEngine, spool: Path, *names: str, pool: ModelPool | None = None
) -> AsyncIterator[tuple[AppClient, Tenancy]]:
    tenancy = Tenancy.with_database(database, spool)
    settings = Settings(admin_key=ADMIN_KEY, auth="keys", prefer_awake_elsewhere=pool is not None)
    engine = ScriptedEngine(served_names=names) if pool is None else None
    app = create_app(settings, engine=engine, models=pool, tenancy=tenancy)
    fleet = fleet_of(tenancy)
    await fleet.start()  # as the app's lifespan does (the in-process client runs none)
    try:
        async with AppClient(app, timeout=10) as http:
            yield http, tenancy
    finally:
        await fleet.close()
        if tenancy.writer is not None:  # its child process ends with it (no lifespan here)
            await tenancy.writer.close()


def fleet_of(tenancy: Tenancy) -> FleetModels:
    assert tenancy.fleet is not None
    return tenancy.fleet


def sdk(http: AppClient, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
    )


@pytest.fixture
async def two(
    database: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[AppClient, AppClient, Tenancy, Tenancy]]:
    async with (
        replica(database, tmp_path / "a.jsonl", "alpha") as (a, tenancy_a),
        replica(database, tmp_path / "b.jsonl", "beta") as (b, tenancy_b),
    ):
        await fleet_of(tenancy_a).beat()  # a started first: it sees b from its next beat
        yield a, b, tenancy_a, tenancy_b


async def test_each_replica_lists_the_fleets_models_for_the_openai_client(
    two: tuple[AppClient, AppClient, Tenancy, Tenancy],
) -> None:
    a, b, tenancy, _ = two
    _, secret = await new_key(tenancy)
    for http in (a, b):
        listed = await sdk(http, secret).models.list()
        assert sorted(card.id for card in listed.data) == ["alpha", "beta"]
        card = await sdk(http, secret).models.retrieve("beta")
        assert card.id == "beta" and card.model_extra and card.model_extra["state"] == "awake"
    raw = (await a.get("/v1/models", headers=bearer(secret))).json()
    assert raw["object"] == "list" and [c["id"] for c in raw["data"]] == ["alpha", "beta"]
    missing = await a.get("/v1/models/gamma", headers=bearer(secret))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_a_key_sees_only_the_fleets_models_it_may_use(
    two: tuple[AppClient, AppClient, Tenancy, Tenancy],
) -> None:
    a, b, tenancy, _ = two
    _, secret = await new_key(tenancy, models=("alpha",))
    for http in (a, b):  # b serves no model this key may use: it lists a's alpha
        listed = await sdk(http, secret).models.list()
        assert [card.id for card in listed.data] == ["alpha"]
        hidden = await http.get("/v1/models/beta", headers=bearer(secret))
        assert hidden.status_code == 404, hidden.text
    # The peer's model the key may not use: the same 404 as a model nobody serves, never
    # the 429 that would tell the key another replica has it.
    refused = await a.post(URL, json=chat("beta"), headers=bearer(secret))
    nobody = await a.post(URL, json=chat("gamma"), headers=bearer(secret))
    assert refused.status_code == nobody.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"


async def test_the_peers_model_is_refused_fast_and_costs_the_key_nothing(
    two: tuple[AppClient, AppClient, Tenancy, Tenancy],
    database: AsyncEngine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b, tenancy, tenancy_b = two
    key_id, secret = await new_key(tenancy, rpm=1)
    caplog.set_level(logging.INFO, logger="lilac.access")
    for path, body in ((URL, chat("beta")), ("/v1/completions", {"model": "beta", "prompt": "x"})):
        for _ in range(3):
            refused = await a.post(path, json=body, headers=bearer(secret))
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert error["code"] == "model_not_here" and error["param"] == "model"
            assert "`beta`" in error["message"]
    streamed = await a.post(URL, json={**chat("beta"), "stream": True}, headers=bearer(secret))
    assert streamed.status_code == 429 and streamed.json()["error"]["code"] == "model_not_here"
    for path, body in (
        ("/v1/responses", {"model": "beta", "input": "hi"}),
        ("/v1/responses", {"model": "beta", "input": "hi", "background": True}),
        (
            "/v1/messages",
            {"model": "beta", "max_tokens": 2, "messages": [chat("x")["messages"][0]]},
        ),
        ("/tokenize", {"model": "beta", "prompt": "hi"}),
    ):
        other = await a.post(path, json=body, headers=bearer(secret))
        assert other.status_code == 429, (path, other.text)
        assert "served by another replica" in other.text and other.headers["retry-after"] == "1"
    outcomes = [r.access["outcome"] for r in caplog.records if r.name == "lilac.access"]  # type: ignore[attr-defined]
    assert outcomes == ["model_not_here"] * 11
    models = {r.access["model"] for r in caplog.records if r.name == "lilac.access"}  # type: ignore[attr-defined]
    assert models == {"beta"}

    # None of them took the key's one request a minute: b serves it, then the limit holds.
    served = await b.post(URL, json=chat("beta"), headers=bearer(secret))
    assert served.status_code == 200, served.text
    over = await b.post(URL, json=chat("beta"), headers=bearer(secret))
    assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limit_exceeded"
    for replica_tenancy in (tenancy, tenancy_b):  # refusals are counted in the background
        assert replica_tenancy.writer is not None
        await replica_tenancy.writer.close()
    assert [row.model for row in await usage_rows(database)] == ["beta"]  # b's, billed once
    assert await refusal_counts(database) == {(key_id, "rate_limit_exceeded"): 1}


async def test_a_replica_that_leaves_drops_out_of_the_list(
    two: tuple[AppClient, AppClient, Tenancy, Tenancy],
) -> None:
    a, _, tenancy, tenancy_b = two
    _, secret = await new_key(tenancy)
    assert (await a.post(URL, json=chat("beta"), headers=bearer(secret))).status_code == 429
    await fleet_of(tenancy_b).close()  # b stops cleanly: its rows go
    await fleet_of(tenancy).beat()
    listed = await sdk(a, secret).models.list()
    assert [card.id for card in listed.data] == ["alpha"]
    gone = await a.post(URL, json=chat("beta"), headers=bearer(secret))
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"


async def test_a_model_nobody_serves_is_still_a_404(
    two: tuple[AppClient, AppClient, Tenancy, Tenancy],
) -> None:
    a, _, tenancy, _ = two
    _, secret = await new_key(tenancy)
    with pytest.raises(openai.NotFoundError):
        await sdk(a, secret).chat.completions.create(
            model="gamma", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    served = await sdk(a, secret).chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert served.model == "alpha"


def sleepy_pool(name: str) -> ModelPool:
    pool = ModelPool(PauseSleeper(), prefer_awake_elsewhere=True)
    pool.add(ScriptedEngine(served_names=(name,)), WarmConfig())
    return pool


async def test_a_sleeping_model_bounces_only_while_a_peer_has_it_awake(
    database: AsyncEngine, tmp_path: Path
) -> None:
    here, there = sleepy_pool("alpha"), sleepy_pool("alpha")
    async with (
        replica(database, tmp_path / "a.jsonl", pool=here) as (a, tenancy_a),
        replica(database, tmp_path / "c.jsonl", pool=there) as (_, tenancy_c),
    ):
        _, secret = await new_key(tenancy_a)
        await here.sleep(here.models[0])
        await fleet_of(tenancy_a).beat()
        # Awake on c (as published): the first attempt here goes elsewhere.
        bounced = await a.post(URL, json=chat("alpha"), headers=bearer(secret))
        assert bounced.status_code == 429 and bounced.json()["error"]["code"] == "model_asleep_here"
        assert str(here.models[0].state) == "asleep"
        # Asleep on c too (published at its next heartbeat): no box has it awake, so the
        # first attempt wakes it here rather than bouncing off every box.
        await there.sleep(there.models[0])
        await fleet_of(tenancy_c).beat()
        await fleet_of(tenancy_a).beat()
        body = {**chat("alpha"), "user": "another request"}
        served = await a.post(URL, json=body, headers=bearer(secret))
        assert served.status_code == 200, served.text
        assert str(here.models[0].state) == "awake"
