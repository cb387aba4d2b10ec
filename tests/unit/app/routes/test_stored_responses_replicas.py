"""Two replicas on one real PostgreSQL database: a response stored through one is read
and deleted through the other; while the database is down the routes answer 503 with
Retry-After (never a 500), and work again once it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.db.engine import open_database
from tests.client import provided
from tests.postgres import TempPostgres
from tests.unit.app.routes.test_stored_responses import save, sdk
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key


async def test_replicas_share_stored_responses_and_outages_are_503s(
    tmp_path: Path, pg_server: TempPostgres
) -> None:
    url = await pg_server.new_database("replicas")
    first_pool = await open_database(url)
    second_pool = await open_database(url)
    async with (
        keyed_app(first_pool, tmp_path / "one.jsonl") as (one, tenancy),
        keyed_app(second_pool, tmp_path / "two.jsonl") as (two, _),
    ):
        key_id, secret = await new_key(tenancy)
        body = await save(provided(one.app, "response_store"), key_id, "resp_shared")
        read = await two.get("/v1/responses/resp_shared", headers=bearer(secret))
        assert read.status_code == 200 and read.content == body

        with pg_server.outage():
            await asyncio.sleep(1.1)  # past the key cache's second: the key is trusted
            down = await two.get("/v1/responses/resp_shared", headers=bearer(secret))
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "database_unavailable"
            assert int(down.headers["retry-after"]) >= 1

        await sdk(two, secret).responses.delete("resp_shared")
        gone = await one.get("/v1/responses/resp_shared", headers=bearer(secret))
        assert gone.status_code == 404
    await first_pool.dispose()
    await second_pool.dispose()
