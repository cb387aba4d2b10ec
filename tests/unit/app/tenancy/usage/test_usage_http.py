"""Metering over HTTP: every keyed request leaves a usage row with the counts its client
saw; 429s carry Retry-After and the x-ratelimit-* headers; a failing database spools
usage and keeps known keys working; the admin routes and the usage report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.schemas.chat import chat_request_decoder
from app.tenancy.consumes import Consumes
from engine.scripted import ScriptedEngine
from tests.client import provided, stream_events
from tests.unit.app.tenancy.helpers import (
    ADMIN_KEY,
    URL,
    bearer,
    chat,
    keyed_app,
    new_key,
    refusal_counts,
    usage_rows,
)

RATE_HEADERS = [
    f"x-ratelimit-{what}-{kind}"
    for what in ("limit", "remaining", "reset")
    for kind in ("requests", "tokens")
]


async def test_a_request_is_metered_with_what_the_client_saw(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        key_id, secret = await new_key(tenancy, tpm=10_000)
        response = await http.post(URL, json=chat(n=2), headers=bearer(secret))
        assert response.status_code == 200
        for header in RATE_HEADERS:
            assert header in response.headers, header
        assert response.headers["x-ratelimit-limit-requests"] == "200"
        assert response.headers["x-ratelimit-remaining-requests"] == "199"
        body_usage = response.json()["usage"]
        assert body_usage["completion_tokens_details"] == {"reasoning_tokens": 0}
        assert body_usage["prompt_tokens_details"] == {"cached_tokens": 0}
        streamed = await http.post(
            URL,
            json=chat(stream=True, stream_options={"include_usage": True}),
            headers=bearer(secret),
        )
        stream_usage = stream_events(streamed)[-1]["usage"]
        rows = await usage_rows(database)
    assert [r.outcome for r in rows] == ["completed", "completed"]
    assert rows[0].request_id == response.json()["id"]
    for row, seen, n in ((rows[0], body_usage, 2), (rows[1], stream_usage, 1)):
        assert row.key_id == key_id and row.model == "scripted" and row.n == n
        assert row.endpoint == URL
        assert row.prompt_tokens == seen["prompt_tokens"] > 0
        assert row.completion_tokens == seen["completion_tokens"] > 0
        assert row.duration_ms >= row.ttft_ms >= row.queue_ms >= 0  # admission came first
    keys = await tenancy.store.list()  # type: ignore[union-attr]
    assert keys[0].last_used_at is not None


async def test_a_responses_limits_are_those_its_admission_left(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """An admitted request's x-ratelimit-* headers are the key's limits as they stood
    when it was accepted, its own reservation taken (OpenAI's); a response that was not
    admitted (here the model list) shows them as they stand: the tokens the request
    reserved but did not use are back. Another key's count is its own."""
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=100, tpm=10_000)
        _, other = await new_key(tenancy, rpm=100, tpm=10_000)
        response = await http.post(URL, json=chat(max_tokens=2_000), headers=bearer(secret))
        assert response.status_code == 200
        used = response.json()["usage"]["total_tokens"]
        assert used < 100
        admitted = int(response.headers["x-ratelimit-remaining-tokens"])
        assert admitted <= 10_000 - 2_000  # the reservation: every output token it may use
        assert response.headers["x-ratelimit-remaining-requests"] == "99"
        listed = await http.get("/v1/models", headers=bearer(secret))
        now = int(listed.headers["x-ratelimit-remaining-tokens"])
        assert now >= 10_000 - used - 1  # settled: only what it used is taken (refills aside)
        assert listed.headers["x-ratelimit-remaining-requests"] == "99"
        its_own = await http.post(URL, json=chat(max_tokens=2_000), headers=bearer(other))
        assert its_own.headers["x-ratelimit-remaining-requests"] == "99"


async def test_over_the_limit_is_a_429_with_retry_after(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=2)
        for _ in range(2):
            assert (await http.post(URL, json=chat(), headers=bearer(secret))).status_code == 200
        refused = await http.post(URL, json=chat(), headers=bearer(secret))
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_exceeded"
        assert int(refused.headers["retry-after"]) == error["retry_after"] >= 1
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        _, zero = await new_key(tenancy, rpm=0)
        assert (await http.post(URL, json=chat(), headers=bearer(zero))).status_code == 429
        await tenancy.writer.close()  # type: ignore[union-attr]  # rejections are not awaited
        rows = await usage_rows(database)
        refused = await refusal_counts(database)
    assert [r.outcome for r in rows] == ["completed", "completed"]  # refusals are counts
    assert sum(refused.values()) == 2
    assert {reason for _, reason in refused} == {"rate_limit_exceeded"}


async def test_concurrent_requests_per_key(database: AsyncEngine, tmp_path: Path) -> None:
    engine = ScriptedEngine(token_delay_s=0.2)
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        _, secret = await new_key(tenancy, max_concurrent=1)
        first = asyncio.create_task(http.post(URL, json=chat(), headers=bearer(secret)))
        await asyncio.sleep(0.3)
        second = await http.post(URL, json=chat(), headers=bearer(secret))
        assert second.status_code == 429
        assert "concurrent" in second.json()["error"]["message"]
        assert (await first).status_code == 200
        assert (await http.post(URL, json=chat(), headers=bearer(secret))).status_code == 200


async def test_a_cancelled_request_counts_what_it_used(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A client that goes away mid-stream: the server closes the stream's iterator (the
    in-process client reads whole bodies, so the test closes it as the server would)."""
    engine = ScriptedEngine(tokens=["a"] * 50, token_delay_s=0.01)
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        key = await tenancy.auth.authenticate(f"Bearer {secret}".encode())
        assert key is not None
        body = chat_request_decoder.decode(json.dumps(chat(stream=True, max_tokens=50)))
        meter = await tenancy.admit(key, Consumes(URL, "scripted", tokens=100, slots=1))
        assert meter is not None
        frames = await provided(http.app, "chat").open_stream(body, "key:x", meter)
        for _ in range(3):
            await anext(frames)
        await frames.aclose()
        await tenancy.writer.close()  # type: ignore[union-attr]  # nobody waits on a cancel
        rows = await usage_rows(database)
    assert rows[0].outcome == "cancelled"
    assert 2 <= rows[0].completion_tokens < 50


async def test_a_failing_database_spools_usage_and_keeps_known_keys(
    database: AsyncEngine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.jsonl"
    async with keyed_app(database, spool) as (http, tenancy):
        _, secret = await new_key(tenancy)
        assert (await http.post(URL, json=chat(), headers=bearer(secret))).status_code == 200
        _, unseen = await new_key(tenancy)
        store, writer = tenancy.store, tenancy.writer
        assert store is not None and writer is not None
        broken = create_engine(f"sqlite:///{tmp_path}/missing-folder/x.db")
        store.database = writer.database = broken
        await asyncio.sleep(1.1)  # past the cache's second: the key must be looked up again
        ok = await http.post(URL, json=chat(), headers=bearer(secret))
        assert ok.status_code == 200  # known key, from the cache
        unknown = await http.post(URL, json=chat(), headers=bearer(unseen))
        assert unknown.status_code == 503
        assert unknown.json()["error"]["code"] == "key_store_unavailable"
        spooled = [json.loads(line) for line in spool.read_text().splitlines()]
        assert [r["outcome"] for r in spooled] == ["completed"]
        assert spooled[0]["completion_tokens"] == ok.json()["usage"]["completion_tokens"]
        store.database = writer.database = database  # the database is back
        await writer.close()  # the next flush writes the spool
        rows = await usage_rows(database)
        await broken.dispose()
    assert [r.outcome for r in rows] == ["completed", "completed"]
    assert not spool.exists()


async def test_admin_keys_and_usage_routes(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, _):
        admin = bearer(ADMIN_KEY)
        assert (await http.get("/admin/keys")).status_code == 401
        body = {"name": "dora", "rpm": 5, "cache_group": "team-a"}
        made = await http.post("/admin/keys", json=body, headers=admin)
        assert made.status_code == 201
        key = made.json()
        assert key["key"].startswith("lilac-sk-") and key["rpm"] == 5
        assert key["cache_group"] == "team-a"
        listed = (await http.get("/admin/keys", headers=admin)).json()["data"]
        assert [k["id"] for k in listed] == [key["id"]] and "key" not in listed[0]
        changed = await http.patch(f"/admin/keys/{key['id']}", json={"tpm": 50}, headers=admin)
        assert changed.json()["tpm"] == 50 and changed.json()["rpm"] == 5
        assert changed.json()["cache_group"] == "team-a"
        ungrouped = await http.patch(
            f"/admin/keys/{key['id']}", json={"cache_group": None}, headers=admin
        )
        assert ungrouped.json()["cache_group"] is None
        too_long = await http.patch(
            f"/admin/keys/{key['id']}", json={"cache_group": "g" * 65}, headers=admin
        )
        assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "cache_group"
        bad = await http.patch(f"/admin/keys/{key['id']}", json={"rpm": -1}, headers=admin)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "rpm"
        missing = await http.delete("/admin/keys/key_nope", headers=admin)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "key_not_found"
        await http.post(URL, json=chat(), headers=bearer(key["key"]))
        for by in ("key", "model", "day"):
            report = await http.get(f"/admin/usage?by={by}&since=2000-01-01", headers=admin)
            assert report.status_code == 200
            [row] = report.json()["data"]
            assert row["requests"] == 1 and row["completed"] == 1 and row["completion_tokens"] > 0
        future = await http.get("/admin/usage?since=2999-01-01", headers=admin)
        assert future.json()["data"] == []
        wrong = await http.get("/admin/usage?by=colour", headers=admin)
        assert wrong.status_code == 400


def completions(prompts: int, max_tokens: int = 8) -> dict[str, object]:
    return {"model": "scripted", "prompt": ["hi"] * prompts, "max_tokens": max_tokens}


async def test_each_prompt_of_a_completion_counts_against_the_key(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """`max_concurrent` and the token reservation count a request's prompts."""
    engine = ScriptedEngine(token_delay_s=0.2)
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        _, secret = await new_key(tenancy, max_concurrent=4)
        headers = bearer(secret)
        too_many = await http.post("/v1/completions", json=completions(5), headers=headers)
        assert too_many.status_code == 429
        assert "5 prompts" in too_many.json()["error"]["message"]
        three = asyncio.create_task(
            http.post("/v1/completions", json=completions(3), headers=headers)
        )
        await asyncio.sleep(0.3)
        two = await http.post("/v1/completions", json=completions(2), headers=headers)
        assert two.status_code == 429 and "count as 2" in two.json()["error"]["message"]
        one = await http.post("/v1/completions", json=completions(1), headers=headers)
        assert one.status_code == 200
        assert len((await three).json()["choices"]) == 3
        # A list of token ids is one prompt: one slot, however long.
        ids = {"model": "scripted", "prompt": list(range(1, 9)), "max_tokens": 2}
        assert (await http.post("/v1/completions", json=ids, headers=headers)).status_code == 200
        _, budget = await new_key(tenancy, tpm=300)
        # 4 prompts x 2 choices x 40 tokens = 320 reserved, over the whole minute's 300.
        body = {**completions(4, max_tokens=40), "n": 2}
        over = await http.post("/v1/completions", json=body, headers=bearer(budget))
        assert over.status_code == 429 and "tokens per minute" in over.json()["error"]["message"]
        body = {**completions(1, max_tokens=40), "n": 2}
        assert (await http.post("/v1/completions", json=body, headers=bearer(budget))).is_success
