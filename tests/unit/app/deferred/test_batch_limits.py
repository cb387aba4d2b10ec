"""What creating batches costs a key, over HTTP with a real keys database (both
backends): each creation takes one of the key's requests per minute, and a key has at
most `--max-live-batches` batches not yet ended, however many it sends at once; one
key's batches never count against another's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.unit.app.deferred.test_batches_http import CHAT, chat_line, runner_of, upload
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key

BATCHES = "/v1/batches"


def creation(file_id: str) -> dict[str, str]:
    return {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}


async def test_each_creation_takes_one_of_the_keys_requests_per_minute(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=3)
        file_id = await upload(http, key_id, [chat_line("a")])
        answers = [
            await http.post(BATCHES, json=creation(file_id), headers=bearer(secret))
            for _ in range(4)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        refused = answers[-1]
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert int(refused.headers["retry-after"]) >= 1


async def test_a_key_has_at_most_its_live_batches_even_sent_at_once(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl", max_live_batches=3) as (
        http,
        tenancy,
    ):
        key_id, secret = await new_key(tenancy, rpm=None)
        other_id, other = await new_key(tenancy, rpm=None)
        file_id = await upload(http, key_id, [chat_line("a")])
        answers = await asyncio.gather(
            *(http.post(BATCHES, json=creation(file_id), headers=bearer(secret)) for _ in range(12))
        )
        assert sorted(a.status_code for a in answers) == [200] * 3 + [429] * 9
        refused = next(a for a in answers if a.status_code == 429)
        assert refused.json()["error"]["code"] == "too_many_batches", refused.text
        assert refused.json()["error"]["type"] == "rate_limit_exceeded"
        assert "retry-after" in refused.headers

        # Another key's batches are its own count.
        other_file = await upload(http, other_id, [chat_line("b")])
        mine = await http.post(BATCHES, json=creation(other_file), headers=bearer(other))
        assert mine.status_code == 200, mine.text

        # One ended (cancelled): room for one more.
        made = next(a.json()["id"] for a in answers if a.status_code == 200)
        cancel = await http.post(f"{BATCHES}/{made}/cancel", headers=bearer(secret))
        assert cancel.status_code == 200, cancel.text
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            await runner_of(http).step()
            again = await http.post(BATCHES, json=creation(file_id), headers=bearer(secret))
            if again.status_code == 200:
                break
            assert again.json()["error"]["code"] == "too_many_batches"
            assert asyncio.get_running_loop().time() < deadline, "the cancelled batch never ended"
            await asyncio.sleep(0.05)
