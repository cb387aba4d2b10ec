"""Tenants kept apart in the shared engine, over HTTP with `--auth keys` (scripted
engine, real keys database): each key's prefix-cache salt, a client's own salt only
narrowing its key's scope, keys of one cache group sharing, and /tokenize and
/detokenize under the key's model list and requests per minute, and one key's images
in flight leaving room for another's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.tenancy.keys.auth import DatabaseKeys
from app.tenancy.keys.isolation import cache_salt
from app.tenancy.keys.store import KeyRecord
from engine.scripted import ScriptedEngine
from tests.client import app_client
from tests.images import data_uri, png
from tests.unit.app.tenancy.helpers import (
    URL,
    GroupedKeys,
    bearer,
    chat,
    keyed_app,
    new_key,
)

COMPLETIONS = "/v1/completions"


def test_the_salt_is_the_keys_and_a_clients_own_salt_only_narrows_it() -> None:
    a = KeyRecord(id="a", name="a", created_at=0.0)
    b = KeyRecord(id="b", name="b", created_at=0.0)
    grouped = [replace(k, cache_group="team") for k in (a, b)]
    assert cache_salt(None, None) is None
    assert cache_salt(None, "mine") == "mine"  # without keys: as the client gave it
    salts = {cache_salt(a, None), cache_salt(b, None), cache_salt(a, "x"), cache_salt(b, "x")}
    assert len(salts) == 4 and None not in salts
    # No client salt of b's reaches a's scope, whatever it spells (a's own id, a's salt).
    a_plain = cache_salt(a, None)
    for guess in ("a", "key:a", a_plain, '["key:a", null]', "null"):
        assert cache_salt(b, guess) not in (a_plain, cache_salt(a, "x"))
    assert cache_salt(grouped[0], None) == cache_salt(grouped[1], None) != a_plain
    assert cache_salt(grouped[0], "x") == cache_salt(grouped[1], "x")


async def test_each_key_reaches_the_engine_with_its_own_salt(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        (_, secret_a), (b, secret_b), (c, secret_c) = [await new_key(tenancy) for _ in range(3)]
        assert isinstance(tenancy.auth, DatabaseKeys)
        tenancy.auth = GroupedKeys(tenancy.auth, {b: "team", c: "team"})
        sent = [
            (secret_a, chat()),
            (secret_a, chat()),
            (secret_b, chat()),
            (secret_c, chat()),
            (secret_a, chat(cache_salt="s")),
            (secret_b, chat(cache_salt="s")),
        ]
        for secret, body in sent:
            response = await http.post(URL, json=body, headers=bearer(secret))
            assert response.status_code == 200, response.text
        prompt = {"model": "scripted", "prompt": ["x", "y"], "max_tokens": 1}
        completed = await http.post(COMPLETIONS, json=prompt, headers=bearer(secret_a))
        assert completed.status_code == 200, completed.text
    salts = [request.cache_salt for request in engine.requests]
    a_plain, a_again, group_b, group_c, a_salted, b_salted, *a_prompts = salts
    assert a_plain == a_again == a_prompts[0] == a_prompts[1]  # a reuses its own cache
    assert group_b == group_c != a_plain  # one cache group shares, apart from a
    assert len({a_plain, group_b, a_salted, b_salted}) == 4
    assert all(s is not None and s != "s" for s in salts)


async def test_a_bad_cache_salt_is_a_400(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy)
        for salt in ("", "x" * 129):
            response = await http.post(URL, json=chat(cache_salt=salt), headers=bearer(secret))
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == "cache_salt"


async def test_without_keys_a_clients_salt_goes_to_the_engine_as_given() -> None:
    engine = ScriptedEngine()
    async with app_client(engine, Settings()) as http:
        assert (await http.post(URL, json=chat(cache_salt="mine"))).status_code == 200
        assert (await http.post(URL, json=chat())).status_code == 200
    assert [r.cache_salt for r in engine.requests] == ["mine", None]


async def test_tokenize_and_detokenize_apply_the_keys_model_list(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, allowed = await new_key(tenancy, models=("scripted",))
        _, elsewhere = await new_key(tenancy, models=("another",))
        calls = [
            ("/tokenize", {"model": "scripted", "prompt": "one two"}),
            ("/tokenize", {"prompt": "one two"}),  # no model: the first served one's
            ("/tokenize", {"model": "scripted", "messages": [{"role": "user", "content": "a"}]}),
            ("/detokenize", {"model": "scripted", "tokens": [1, 2]}),
            ("/detokenize", {"tokens": [1, 2]}),
        ]
        for path, body in calls:
            ok = await http.post(path, json=body, headers=bearer(allowed))
            assert ok.status_code == 200, ok.text
            refused = await http.post(path, json=body, headers=bearer(elsewhere))
            assert refused.status_code == 404, (path, body, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "model_not_found"
            assert "tokens" not in refused.json() and "prompt" not in refused.json()


def assert_rate_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["x-ratelimit-limit-requests"] == "3"
    assert response.headers["x-ratelimit-remaining-requests"] == "0"


async def test_tokenize_and_detokenize_count_toward_the_keys_rpm(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, limited = await new_key(tenancy, rpm=3)
        _, other = await new_key(tenancy, rpm=3)
        tokenize = {"model": "scripted", "prompt": "one two"}
        for path, body in (("/tokenize", tokenize), ("/detokenize", {"tokens": [3]})):
            response = await http.post(path, json=body, headers=bearer(limited))
            assert response.status_code == 200, response.text
            assert response.headers["x-ratelimit-limit-requests"] == "3"
        chatted = await http.post(URL, json=chat(), headers=bearer(limited))
        assert chatted.status_code == 200  # the third request of the minute
        assert_rate_limited(await http.post("/tokenize", json=tokenize, headers=bearer(limited)))
        assert_rate_limited(
            await http.post("/detokenize", json={"tokens": [3]}, headers=bearer(limited))
        )
        assert_rate_limited(await http.post(URL, json=chat(), headers=bearer(limited)))
        # Another key's minute is its own.
        fine = await http.post("/tokenize", json=tokenize, headers=bearer(other))
        assert fine.status_code == 200
        assert fine.headers["x-ratelimit-remaining-requests"] == "2"


async def test_one_keys_images_in_flight_leave_room_for_anothers(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(supports_vision=True)
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        (a, secret_a), (_, secret_b) = [await new_key(tenancy) for _ in range(2)]
        budget = http.app.dependencies["chat"].dependency()._images.budget
        budget.take(budget.share(f"key:{a}"), f"key:{a}")  # a's large images, in flight
        part = {"type": "image_url", "image_url": {"url": data_uri(png((32, 32), "red"))}}
        with_image = chat(messages=[{"role": "user", "content": [part]}])
        refused = await http.post(URL, json=with_image, headers=bearer(secret_a))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "image_share_exceeded"
        served = await http.post(URL, json=with_image, headers=bearer(secret_b))
        assert served.status_code == 200, served.text
        assert len(engine.requests) == 1 and len(engine.requests[0].images) == 1
