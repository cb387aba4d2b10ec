"""GET /admin/fairness and the `lilac_fair_share_` series, over scripted engines and a
shares file written where a real engine core publishes its own (`write_shares` into the
server's LILAC_FAIRNESS_DIR): each tenant as published, key ids parsed from the tenant
names, the engine's step times, the model filter, the admin key, the stale flag and the
scraped aggregates."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config.settings import Settings
from app.db.engine import open_database
from app.services.generation.fairness import STALE_AFTER_S, tenant_identity
from engine.fairness import SHARES_DIR_ENV, StepTimes, TenantShare, shares_file, write_shares
from engine.scripted import ScriptedEngine
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper
from tests.client import AppClient, app_client, provided, scratch_data_dir
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, keyed_app, new_key

ADMIN = bearer(ADMIN_KEY)
URL = "/admin/fairness"
SHARES = [
    TenantShare("key:key_heavy", 12.5, 2, 2, 0.6, 900, 0.25),
    TenantShare("deferred:key_heavy", 3.0, 1.0, 1, 0.3, 400, 1.5),
    TenantShare("user:alice", 0, 1, 0, 0.1, 50, 0),
    TenantShare("-", 0.0, 1.0, 0, 0.0, 0, 0.0),
]
NO_STEPS = {"count": 0, "mean_s": 0.0, "p95_s": 0.0, "max_s": 0.0}


def settings(**fields: Any) -> Settings:
    return Settings(admin_key=ADMIN_KEY, data_dir=scratch_data_dir(), **fields)


@pytest.fixture(autouse=True)
def shares_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The server's fairness folder, as `lilac-serve` sets it for all its processes."""
    folder = tmp_path / "fairness"
    folder.mkdir()
    monkeypatch.setenv(SHARES_DIR_ENV, str(folder))
    return folder


def publish(
    model: str, shares: list[TenantShare], age_s: float = 0.0, steps: StepTimes | None = None
) -> float:
    """Publish `shares` (and `steps`) as the engine of `model` does, `age_s` seconds ago;
    when."""
    when = time.time() - age_s
    write_shares(shares_file(model), shares, when, steps)
    return when


@pytest.fixture
async def two_models() -> AsyncIterator[AppClient]:
    pool = ModelPool(PauseSleeper())
    pool.add(ScriptedEngine(served_names=("small", "small-alias")))
    pool.add(ScriptedEngine(served_names=("other",)))
    async with app_client(None, settings(), models=pool) as http:
        yield http


async def fairness(http: AppClient, **params: str) -> list[dict[str, Any]]:
    response = await http.get(URL, params=params, headers=ADMIN)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list"
    data: list[dict[str, Any]] = body["data"]
    return data


async def test_each_model_shows_its_tenants_as_published(two_models: AppClient) -> None:
    when = publish("small", SHARES)
    small, other = await fairness(two_models)
    assert small["model"] == "small" and small["fair_share"] is True
    assert small["published_at"] == pytest.approx(when) and small["stale"] is False
    assert small["tenants"][0] == {
        "tenant": "key:key_heavy",
        "key_id": "key_heavy",
        "deferred": False,
        "counter": 12.5,
        "weight": 2.0,
        "active": 2,
        "share_last_minute": 0.6,
        "tokens": 900,
        "engine_queue_wait_s": 0.25,
    }
    identities = [(t["tenant"], t["key_id"], t["deferred"]) for t in small["tenants"]]
    assert identities == [
        ("key:key_heavy", "key_heavy", False),
        ("deferred:key_heavy", "key_heavy", True),
        ("user:alice", None, False),
        ("-", None, False),
    ]
    # Whole numbers in the file are still numbers of the wire's types.
    alice = small["tenants"][2]
    assert isinstance(alice["counter"], float) and isinstance(alice["weight"], float)
    # Nothing published for the other model: no tenants, and stale.
    assert other == {
        "model": "other",
        "fair_share": True,
        "published_at": None,
        "stale": True,
        "tenants": [],
        "engine_steps": NO_STEPS,
    }
    # Published without step times (none in the last minute): zeros.
    assert small["engine_steps"] == NO_STEPS


async def test_each_model_shows_its_engine_step_times(two_models: AppClient) -> None:
    publish("small", SHARES, steps=StepTimes(count=240, mean_s=0.05, p95_s=0.125, max_s=0.5))
    small, other = await fairness(two_models)
    assert small["engine_steps"] == {"count": 240, "mean_s": 0.05, "p95_s": 0.125, "max_s": 0.5}
    assert other["engine_steps"] == NO_STEPS
    # Any of the model's names reads the same engine's; whole seconds are still floats.
    publish("small", SHARES, steps=StepTimes(count=3, mean_s=1, p95_s=2, max_s=2))
    (only,) = await fairness(two_models, model="small-alias")
    assert only["engine_steps"] == {"count": 3, "mean_s": 1.0, "p95_s": 2.0, "max_s": 2.0}
    assert isinstance(only["engine_steps"]["mean_s"], float)


async def test_model_narrows_to_one_model_by_any_of_its_names(two_models: AppClient) -> None:
    publish("small", SHARES)
    (only,) = await fairness(two_models, model="small-alias")
    assert only["model"] == "small" and len(only["tenants"]) == len(SHARES)
    (other,) = await fairness(two_models, model="other")
    assert other["model"] == "other" and other["tenants"] == []
    missing = await two_models.get(URL, params={"model": "nope"}, headers=ADMIN)
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "model_not_found",
        "model",
    )


@pytest.mark.parametrize(
    ("tenant", "key_id", "deferred"),
    [
        ("key:key_1", "key_1", False),
        ("deferred:key_1", "key_1", True),
        ("deferred:key:abc", "abc", True),
        ("deferred:anonymous", None, True),
        ("user:bob", None, False),
        ("peer:10.0.0.1", None, False),
        ("-", None, False),
        ("key:", None, False),
    ],
)
def test_tenant_names_carry_their_key_id(tenant: str, key_id: str | None, deferred: bool) -> None:
    assert tenant_identity(tenant) == (key_id, deferred)


async def test_the_route_needs_the_admin_key() -> None:
    publish("scripted", SHARES)
    async with app_client(ScriptedEngine(), settings()) as http:
        missing = await http.get(URL)
        assert missing.status_code == 401
        assert missing.json()["error"]["type"] == "authentication_error"
        assert (await http.get(URL, headers=bearer("wrong"))).status_code == 401
        assert (await http.get(URL, headers=ADMIN)).status_code == 200
    unset = Settings(data_dir=scratch_data_dir())
    async with app_client(ScriptedEngine(), unset) as http:
        refused = await http.get(URL, headers=ADMIN)
        assert refused.status_code == 403
        assert refused.json()["error"]["type"] == "permission_error"


async def test_a_tenant_key_is_not_the_admin_key(tmp_path: Path) -> None:
    database = await open_database(f"sqlite:///{tmp_path}/lilac.db")
    try:
        async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
            _, secret = await new_key(tenancy)
            assert (await http.get("/v1/models", headers=bearer(secret))).status_code == 200
            refused = await http.get(URL, headers=bearer(secret))
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["type"] == "authentication_error"
    finally:
        await database.dispose()


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_an_old_snapshot_is_stale_only_while_the_model_has_requests() -> None:
    engine = ScriptedEngine(token_delay_s=0.05)
    async with app_client(engine, settings()) as http:
        old = STALE_AFTER_S + 5
        publish("scripted", [TenantShare("key:a", 0.0, 1.0, 0, 1.0, 10, 0.0)], age_s=old)
        (idle,) = await fairness(http)
        assert idle["stale"] is False and idle["published_at"] is not None
        # The snapshot itself counts requests in the engine, and is old.
        publish("scripted", [TenantShare("key:a", 0.0, 1.0, 1, 1.0, 10, 0.0)], age_s=old)
        assert (await fairness(http))[0]["stale"] is True
        publish("scripted", [TenantShare("key:a", 0.0, 1.0, 1, 1.0, 10, 0.0)])
        assert (await fairness(http))[0]["stale"] is False
        # A request of this frontend's in flight, over a snapshot that shows none.
        publish("scripted", [TenantShare("key:a", 0.0, 1.0, 0, 1.0, 10, 0.0)], age_s=old)
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        running = asyncio.create_task(
            http.post("/v1/chat/completions", json={**body, "max_tokens": 10, "ignore_eos": True})
        )
        model = provided(http.app, "models").first
        await asyncio.wait_for(until(lambda: model.in_flight > 0), timeout=5)
        assert (await fairness(http))[0]["stale"] is True
        assert (await running).status_code == 200
        assert (await fairness(http))[0]["stale"] is False


async def test_without_a_fairness_folder_nothing_is_published_or_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SHARES_DIR_ENV)
    async with app_client(ScriptedEngine(), settings()) as http:
        (model,) = await fairness(http)
        assert (model["published_at"], model["stale"], model["tenants"]) == (None, True, [])
        assert model["engine_steps"] == NO_STEPS
        assert (await http.get("/metrics")).status_code == 200
    assert SHARES_DIR_ENV not in os.environ


def fair_share_series(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["model"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("lilac_fair_share_")
    }


async def test_metrics_aggregate_each_model_without_tenant_labels(
    two_models: AppClient,
) -> None:
    publish("small", SHARES)
    scraped = fair_share_series((await two_models.get("/metrics")).text)
    assert scraped == {
        ("lilac_fair_share_active_tenants", "small"): 2,
        ("lilac_fair_share_tenants", "small"): 4,
        ("lilac_fair_share_top_tenant_share", "small"): 0.6,
        ("lilac_fair_share_max_engine_queue_wait_seconds", "small"): 1.5,
        ("lilac_fair_share_counter_spread", "small"): 12.5,
        ("lilac_fair_share_stale", "small"): 0,
        ("lilac_fair_share_active_tenants", "other"): 0,
        ("lilac_fair_share_tenants", "other"): 0,
        ("lilac_fair_share_top_tenant_share", "other"): 0,
        ("lilac_fair_share_max_engine_queue_wait_seconds", "other"): 0,
        ("lilac_fair_share_counter_spread", "other"): 0,
        ("lilac_fair_share_stale", "other"): 1,
    }
    text = (await two_models.get("/metrics")).text
    assert "key_heavy" not in text and "alice" not in text


async def test_with_fair_share_off_the_route_says_so_and_metrics_have_none() -> None:
    publish("scripted", SHARES)
    async with app_client(ScriptedEngine(), settings(fair_share=False)) as http:
        (model,) = await fairness(http)
        assert model["fair_share"] is False
        assert fair_share_series((await http.get("/metrics")).text) == {}
