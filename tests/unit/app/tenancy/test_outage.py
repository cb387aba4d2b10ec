"""A keys database outage, on a real PostgreSQL server stopped mid-test: a key the
database confirmed keeps working for `--key-cache-outage-s`, then its requests get 503
with Retry-After, as does a key never seen; once the server is back, the key works
again and a key revoked during the outage (by another replica) is refused."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from app.db.engine import create_engine, open_database
from app.tenancy.keys.store import KeyStore, new_secret
from tests.postgres import TempPostgres
from tests.unit.app.tenancy.helpers import URL, bearer, chat, keyed_app, new_key

OUTAGE_S = 3.0


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "key_store_unavailable"
    assert int(response.headers["retry-after"]) >= 1


async def test_cached_keys_are_trusted_for_a_bounded_time(
    tmp_path: Path, pg_server: TempPostgres
) -> None:
    url = await pg_server.new_database("outage")
    database = await open_database(url)
    async with keyed_app(database, tmp_path / "spool.jsonl", outage_s=OUTAGE_S) as (
        http,
        tenancy,
    ):
        _, good = await new_key(tenancy)
        revoked_id, revoked = await new_key(tenancy)
        for secret in (good, revoked):
            seen = await http.post(URL, json=chat(), headers=bearer(secret))
            assert seen.status_code == 200
        confirmed = time.monotonic()
        replica = create_engine(url)  # another replica revokes, nobody tells us
        await KeyStore(replica).revoke(revoked_id)
        await replica.dispose()

        with pg_server.outage():
            await asyncio.sleep(1.1)  # past the cache's second: every lookup fails now
            trusted = await http.post(URL, json=chat(), headers=bearer(good))
            assert trusted.status_code == 200, trusted.text
            assert_unavailable(await http.post(URL, json=chat(), headers=bearer(new_secret())))

            await asyncio.sleep(max(0.0, confirmed + OUTAGE_S + 0.2 - time.monotonic()))
            assert_unavailable(await http.post(URL, json=chat(), headers=bearer(good)))
            assert_unavailable(await http.post(URL, json=chat(), headers=bearer(revoked)))

        back = await http.post(URL, json=chat(), headers=bearer(good))
        assert back.status_code == 200, back.text
        refused = await http.post(URL, json=chat(), headers=bearer(revoked))
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
    await database.dispose()
