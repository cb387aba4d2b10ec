"""What one key may hold of background responses, over HTTP with the scripted engine and
a real keys database (both backends): at most `--max-queued-background-per-key` queued
or in progress (429 `too_many_background_responses`, room again once one is cancelled
or ends), at most `--max-followers-per-key` event streams open at once on this replica
(429 `too_many_followers`, every slot given back however a stream ends), and each
stream open at most `--max-follow-s` (then an `error` event `follow_timeout`, the
response untouched). One key's bounds never touch another's."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from tests.client import app_client, provided
from tests.unit.app.deferred.test_background_http import URL, ask, events_of, finished, queue
from tests.unit.app.deferred.test_batches_http import runner_of
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key


def refused(answer: httpx.Response, code: str) -> dict[str, Any]:
    assert answer.status_code == 429, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == code and error["type"] == "rate_limit_exceeded", error
    assert int(answer.headers["retry-after"]) >= 1
    return error


async def held(tenancy: Tenancy, owner: str, count: int, timeout_s: float = 10.0) -> None:
    """Wait until `owner` holds `count` follower slots."""
    deadline = time.monotonic() + timeout_s
    while tenancy.followers.open(owner) != count:
        assert time.monotonic() < deadline, (owner, tenancy.followers.open(owner), count)
        await asyncio.sleep(0.01)


async def queued_jobs(http: httpx.AsyncClient, owner: str) -> list[Any]:
    jobs = await runner_of(http).store.active("response", ("queued", "in_progress"))
    return [job for job in jobs if job.owner == owner]


def follow(http: httpx.AsyncClient, secret: str, response_id: str) -> asyncio.Task[Any]:
    get = http.get(f"{URL}/{response_id}?stream=true", headers=bearer(secret))
    return asyncio.create_task(get)


async def test_a_key_has_at_most_its_queued_background_responses(
    database: AsyncEngine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.jsonl"
    async with keyed_app(database, spool, max_queued_background_per_key=2) as (http, tenancy):
        _, mine = await new_key(tenancy, rpm=None)
        _, other = await new_key(tenancy, rpm=None)
        answers = await asyncio.gather(
            *(http.post(URL, json=ask(), headers=bearer(mine)) for _ in range(6))
        )
        assert sorted(a.status_code for a in answers) == [200] * 2 + [429] * 4
        error = refused(
            next(a for a in answers if a.status_code == 429), "too_many_background_responses"
        )
        assert "2 background responses" in error["message"]
        assert "/cancel" in error["message"]

        # Another key's are its own count.
        assert (await queue(http, other))["status"] == "queued"

        # One cancelled: room for one more, then none again.
        made = [a.json()["id"] for a in answers if a.status_code == 200]
        cancel = await http.post(f"{URL}/{made[0]}/cancel", headers=bearer(mine))
        assert cancel.status_code == 200, cancel.text
        third = await queue(http, mine)
        again = await http.post(URL, json=ask(), headers=bearer(mine))
        refused(again, "too_many_background_responses")

        # Both run to their end: room again.
        for response_id in (made[1], third["id"]):
            assert (await finished(http, mine, response_id))["status"] == "completed"
        assert (await queue(http, mine))["status"] == "queued"


async def test_a_keys_followers_are_bounded_and_every_slot_comes_back(
    database: AsyncEngine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.jsonl"
    async with keyed_app(database, spool, max_followers_per_key=2) as (http, tenancy):
        a_id, a = await new_key(tenancy, rpm=None)
        b_id, b = await new_key(tenancy, rpm=None)
        a_response = (await queue(http, a))["id"]
        b_response = (await queue(http, b))["id"]
        # The runner is not stepped: both stay queued, and their followers wait on them.
        first, second = follow(http, a, a_response), follow(http, a, a_response)
        await held(tenancy, a_id, 2)
        over = await http.get(f"{URL}/{a_response}?stream=true", headers=bearer(a))
        error = refused(over, "too_many_followers")
        assert "2 event streams" in error["message"]
        # `background: true` with `stream: true` follows too: refused before it queues.
        streamed = await http.post(URL, json=ask(stream=True), headers=bearer(a))
        refused(streamed, "too_many_followers")
        assert len(await queued_jobs(http, a_id)) == 1

        # Another key's followers are its own count.
        b_follower = follow(http, b, b_response)
        await held(tenancy, b_id, 1)

        # A client gone mid-stream gives its slot back ...
        first.cancel()
        await held(tenancy, a_id, 1)
        third = follow(http, a, a_response)
        await held(tenancy, a_id, 2)
        # ... and so do streams that end with the response (cancelled: final).
        cancel = await http.post(f"{URL}/{a_response}/cancel", headers=bearer(a))
        assert cancel.status_code == 200, cancel.text
        for task in (second, third):
            assert (await task).status_code == 200
        await held(tenancy, a_id, 0)
        # A refused or failed stream never held one: an unknown id is a 404.
        unknown = await http.get(f"{URL}/resp_nothing?stream=true", headers=bearer(a))
        assert unknown.status_code == 404
        assert tenancy.followers.open(a_id) == 0
        assert tenancy.followers.open(b_id) == 1

        await http.post(f"{URL}/{b_response}/cancel", headers=bearer(b))
        assert (await b_follower).status_code == 200
        await held(tenancy, b_id, 0)


async def test_a_follower_ends_with_follow_timeout_and_the_response_goes_on(
    database: AsyncEngine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.jsonl"
    async with keyed_app(database, spool, max_follow_s=0.3) as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=None)
        queued = (await queue(http, secret))["id"]
        started = time.monotonic()
        answer = await http.get(f"{URL}/{queued}?stream=true", headers=bearer(secret))
        assert time.monotonic() - started < 5
        [event] = events_of(answer)  # the whole stream: nothing ran yet, then the end
        assert event["type"] == "error" and event["code"] == "follow_timeout"
        assert "reconnect" in event["message"].lower() and "stream=true" in event["message"]
        assert tenancy.followers.open(key_id) == 0

        # From a later event on: the message names where to read on from.
        later = await http.get(
            f"{URL}/{queued}?stream=true&starting_after=4", headers=bearer(secret)
        )
        [event] = events_of(later)
        assert event["code"] == "follow_timeout" and event["sequence_number"] == 5
        assert "starting_after=4" in event["message"]

        # The response is untouched: it runs, and its events read whole.
        assert (await finished(http, secret, queued))["status"] == "completed"
        events = events_of(await http.get(f"{URL}/{queued}?stream=true", headers=bearer(secret)))
        assert events[-1]["type"] == "response.completed"
        assert all(event["type"] != "error" for event in events)


async def test_a_keyless_server_bounds_its_anonymous_owner(tmp_path: Path) -> None:
    settings = Settings(
        auth="none",
        data_dir=str(tmp_path),
        max_followers_per_key=1,
        max_queued_background_per_key=1,
    )
    async with app_client(ScriptedEngine(), settings) as http:
        made = await http.post(URL, json=ask())
        assert made.status_code == 200, made.text
        refused(await http.post(URL, json=ask()), "too_many_background_responses")
        response_id = made.json()["id"]
        first = asyncio.create_task(http.get(f"{URL}/{response_id}?stream=true"))
        tenancy: Tenancy = provided(http.app, "tenancy")
        await held(tenancy, "anonymous", 1)
        refused(await http.get(f"{URL}/{response_id}?stream=true"), "too_many_followers")
        assert (await http.post(f"{URL}/{response_id}/cancel")).status_code == 200
        assert (await first).status_code == 200
        await held(tenancy, "anonymous", 0)
