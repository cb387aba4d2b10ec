"""What creating batches costs a key, over HTTP with a real keys database (both
backends): each creation takes one of the key's requests per minute, and a key has at
most `--max-live-batches` batches not yet ended, however many it sends at once; one
key's batches never count against another's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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
        # OpenAI's rate-limit headers on each answer, as on the generation routes.
        remaining = [a.headers["x-ratelimit-remaining-requests"] for a in answers]
        assert remaining == ["2", "1", "0", "0"]
        assert {a.headers["x-ratelimit-limit-requests"] for a in answers} == {"3"}
        assert all("x-ratelimit-reset-requests" in a.headers for a in answers)


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


async def test_a_replica_validates_two_batches_at_a_time(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Five batches made at once: the runner's look at the jobs starts two validations
    (each holds its file in memory), the others stay `validating` until a later look,
    and all five end up running."""
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=None)
        runner = runner_of(http)
        jobs = runner.handlers["batch"]
        started: list[str] = []
        at_once: list[int] = []
        validation = jobs._validation  # type: ignore[attr-defined]

        async def counted(job: Any) -> bool:  # a large file: a second's validation
            started.append(job.id)
            at_once.append(len(jobs._validating))  # type: ignore[attr-defined]
            await asyncio.sleep(1.0)
            return bool(await validation(job))

        jobs._validation = counted  # type: ignore[attr-defined]
        file_id = await upload(http, key_id, [chat_line(f"r{i}") for i in range(3)])
        made = [
            (await http.post(BATCHES, json=creation(file_id), headers=bearer(secret))).json()["id"]
            for _ in range(5)
        ]
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            await runner.step()
            states = [
                (await http.get(f"{BATCHES}/{b}", headers=bearer(secret))).json()["status"]
                for b in made
            ]
            if "validating" not in states:
                break
            assert asyncio.get_running_loop().time() < deadline, (states, started, at_once)
            await asyncio.sleep(0.02)
        assert sorted(started) == sorted(made)
        assert max(at_once) == 2, at_once


async def test_a_validation_longer_than_a_tick_frees_its_place_when_it_ends(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """A validation still going when its tick stops waiting moves its batch on by itself;
    no later tick tends that batch as validating, so its place among the replica's two
    must be freed when it ends, or after two such batches no validation would start."""
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=None)
        runner = runner_of(http)
        jobs = runner.handlers["batch"]
        validation = jobs._validation  # type: ignore[attr-defined]

        async def slow(job: Any) -> bool:  # longer than the tick's wait for it
            await asyncio.sleep(1.0)
            return bool(await validation(job))

        jobs._validation = slow  # type: ignore[attr-defined]
        file_id = await upload(http, key_id, [chat_line("r0")])
        made = await http.post(BATCHES, json=creation(file_id), headers=bearer(secret))
        await runner.step()  # starts the validation, waits half a second for it
        assert len(jobs._validating) == 1  # type: ignore[attr-defined]
        await asyncio.sleep(1.5)  # it ends, and the batch is in progress
        assert jobs._validating == {}  # type: ignore[attr-defined]
        status = await http.get(f"{BATCHES}/{made.json()['id']}", headers=bearer(secret))
        assert status.json()["status"] != "validating"
