"""Prices over HTTP, keys on, over the scripted engine and a real database (SQLite file
and PostgreSQL): each usage row costs its tokens at the prices in force when its request
started; the usage report (admin route and CLI) sums the cost per key and per model;
`/v1/models` shows the price of a token; the price routes need the admin key and check
what they are given."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.launch.cli import main
from app.tenancy.service import Tenancy
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import (
    ADMIN_KEY,
    URL,
    bearer,
    chat,
    keyed_app,
    new_key,
    usage_rows,
)

ADMIN = bearer(ADMIN_KEY)
FIRST = {"input": "0.70", "cached_input": "0.20", "output": "3.50"}
SECOND = {"input": 1.25, "cached_input": "0.5", "output": "5"}
MICROS = {"0.70": 700_000, "0.20": 200_000, "3.50": 3_500_000}


def cost(row: Any, input_micros: int, cached_micros: int, output_micros: int) -> int:
    uncached = row.prompt_tokens - row.cached_tokens
    total = (
        uncached * input_micros + row.cached_tokens * cached_micros
        + row.completion_tokens * output_micros
    )  # fmt: skip
    return (total + 500_000) // 1_000_000


async def two_requests(http: AppClient, secrets: list[str], max_tokens: int) -> None:
    for secret in secrets:
        response = await http.post(URL, json=chat(max_tokens=max_tokens), headers=bearer(secret))
        assert response.status_code == 200, response.text


def database_url(database: AsyncEngine) -> str:
    return database.url.render_as_string(hide_password=False)


async def test_each_row_costs_the_prices_in_force_when_it_started(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        a_id, a = await new_key(tenancy)
        b_id, b = await new_key(tenancy)
        put = await http.put("/admin/prices/scripted", json=FIRST, headers=ADMIN)
        assert put.status_code == 200, put.text
        assert put.json()["input_micros"] == 700_000
        await two_requests(http, [a, b], 8)
        changed = await http.put(
            "/admin/prices/scripted", json={**SECOND, "effective_from": time.time()}, headers=ADMIN
        )
        assert changed.status_code == 200, changed.text
        await two_requests(http, [a, b], 5)
        rows = await usage_rows(database)
        by_key = (await http.get("/admin/usage?by=key", headers=ADMIN)).json()
        by_model = (await http.get("/admin/usage?by=model", headers=ADMIN)).json()
    assert len(rows) == 4
    expected = [cost(r, 700_000, 200_000, 3_500_000) for r in rows[:2]]
    expected += [cost(r, 1_250_000, 500_000, 5_000_000) for r in rows[2:]]
    assert [r.cost_micros for r in rows] == expected
    assert all(c > 0 for c in expected)
    assert by_key["currency"] == "USD"
    keyed = {row["key"]: row for row in by_key["data"]}
    for key_id, mine in ((a_id, rows[0::2]), (b_id, rows[1::2])):
        micros = sum(r.cost_micros for r in mine)
        assert keyed[key_id]["cost_micros"] == micros
        assert keyed[key_id]["cost"] == f"{micros / 1_000_000:.6f}"
        assert keyed[key_id]["unpriced"] == 0
    [model] = by_model["data"]
    assert model["model"] == "scripted"
    assert model["cost_micros"] == sum(expected) and model["currency"] == "USD"
    # The CLI reads the same database and shows the same sums.
    url = database_url(database)
    report = await asyncio.to_thread(
        lambda: main(["usage", "--by", "model", "--format", "json", "--database-url", url])
    )
    assert report == 0


async def test_the_cli_shows_the_cost(
    database: AsyncEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = database_url(database)

    def cli(*args: str) -> int:
        return main([*args, "--database-url", url])

    assert await asyncio.to_thread(cli, "prices", "set", "scripted", "--input", "0.70",
                                   "--cached-input", "0.20", "--output", "3.50")  == 0  # fmt: skip
    capsys.readouterr()
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy)
        await two_requests(http, [secret, secret], 8)
        rows = await usage_rows(database)
    assert await asyncio.to_thread(cli, "usage", "--by", "model", "--format", "json") == 0
    [model] = json.loads(capsys.readouterr().out)
    total = sum(cost(r, 700_000, 200_000, 3_500_000) for r in rows)
    assert model["cost_micros"] == total == sum(r.cost_micros for r in rows)
    assert await asyncio.to_thread(cli, "usage", "--by", "key") == 0
    header, row = capsys.readouterr().out.splitlines()
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["cost"] == f"{total / 1_000_000:.6f}" and cells["currency"] == "USD"
    assert await asyncio.to_thread(cli, "prices", "list", "--format", "json") == 0
    [price] = json.loads(capsys.readouterr().out)
    assert (price["model"], price["input"], price["output"]) == ("scripted", "0.700000", "3.500000")


async def test_an_unpriced_model_costs_nothing_and_says_so(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy)
        await two_requests(http, [secret], 8)
        rows = await usage_rows(database)
        report = (await http.get("/admin/usage?by=model", headers=ADMIN)).json()
        card = (await http.get("/v1/models/scripted", headers=bearer(secret))).json()
    assert [r.cost_micros for r in rows] == [0]
    [model] = report["data"]
    assert (model["cost"], model["cost_micros"], model["unpriced"]) == ("0.000000", 0, 1)
    assert "pricing" not in card


async def started_prices(tenancy: Tenancy) -> None:
    """What the server's start does for the prices (the test client runs no lifespan)."""
    assert tenancy.prices is not None
    await tenancy.prices.start(tenancy.price_seeds)


async def test_price_seeds_are_written_once(database: AsyncEngine, tmp_path: Path) -> None:
    seeds = ("scripted=0.70/0.20/3.50",)
    async with keyed_app(database, tmp_path / "spool", price=seeds) as (http, tenancy):
        await started_prices(tenancy)
        listed = (await http.get("/admin/prices", headers=ADMIN)).json()
        assert [p["input_micros"] for p in listed["data"]] == [700_000]
        changed = await http.put("/admin/prices/scripted", json=SECOND, headers=ADMIN)
        assert changed.status_code == 200
        await tenancy.close()
    async with keyed_app(database, tmp_path / "spool2", price=seeds) as (http, tenancy):
        await started_prices(tenancy)
        listed = (await http.get("/admin/prices", headers=ADMIN)).json()
        history = (await http.get("/admin/prices?all=true", headers=ADMIN)).json()
        await tenancy.close()
    assert [p["input_micros"] for p in listed["data"]] == [1_250_000]  # the CLI's kept
    assert len(history["data"]) == 2


async def test_models_carry_pricing_context_length_and_top_provider(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy)
        await http.put("/admin/prices/scripted", json=FIRST, headers=ADMIN)
        body = (await http.get("/v1/models", headers=bearer(secret))).json()
        sdk = openai.AsyncOpenAI(
            base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
        )
        listed = [model async for model in sdk.models.list()]
    [card] = body["data"]
    assert card["pricing"] == {
        "prompt": "0.0000007",
        "completion": "0.0000035",
        "input_cache_read": "0.0000002",
    }
    assert card["context_length"] == card["max_model_len"]
    assert card["top_provider"] == {"max_completion_tokens": card["max_model_len"]}
    [model] = listed
    assert model.id == "scripted"
    assert (model.model_extra or {})["pricing"]["prompt"] == "0.0000007"


async def test_the_price_routes_need_the_admin_key_and_check_their_input(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy)
        url = "/admin/prices/scripted"
        assert (await http.put(url, json=FIRST)).status_code == 401
        assert (await http.get("/admin/prices")).status_code == 401
        tenant = await http.put(url, json=FIRST, headers=bearer(secret))
        assert tenant.status_code in (401, 403)
        bad = {
            "input": ({**FIRST, "input": "-0.70"}, 400),
            "output": ({**FIRST, "output": "0.0000001"}, 400),
            "batch_discount": ({**FIRST, "batch_discount": 150}, 400),
            "effective_from": ({**FIRST, "effective_from": "soon"}, 400),
        }
        for param, (body, status) in bad.items():
            response = await http.put(url, json=body, headers=ADMIN)
            assert response.status_code == status, (param, response.text)
            error = response.json()["error"]
            assert (error["type"], error["param"]) == ("invalid_request_error", param)
        missing = await http.put(url, json={"input": "1"}, headers=ADMIN)
        assert missing.status_code == 400
        assert missing.json()["error"]["type"] == "invalid_request_error"
        unknown = await http.put("/admin/prices/no-such-model", json=FIRST, headers=ADMIN)
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        listed = (await http.get("/admin/prices", headers=ADMIN)).json()
    assert listed["data"] == []
