"""Authentication over HTTP with `--auth keys` (and the other modes): what every bad
key gets, which routes stay open, model-restricted keys, revocation across replicas."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.tenancy.keys.store import new_secret
from app.tenancy.service import AuthConfigError, auth_mode
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import ADMIN_KEY, URL, bearer, chat, keyed_app, new_key


def assert_invalid_key(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None and error["message"]


BAD_HEADERS: list[dict[str, str] | list[tuple[bytes, bytes]]] = [
    {},
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer    "},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"Authorization": "Bearer sk-not-ours"},
    {"Authorization": "Bearer lilac-sk-tooshort"},
    {"Authorization": "Bearer " + new_secret()},  # well formed, unknown
    [(b"authorization", "Bearer lilac-sk-é".encode())],  # non-ASCII
    [(b"authorization", b"Bearer \xff\xfe")],  # not even UTF-8
]


async def test_bad_keys_are_401_on_every_route(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, _):
        for headers in BAD_HEADERS:
            for method, path, body in (
                ("POST", URL, chat()),
                ("POST", "/v1/completions", {"model": "scripted", "prompt": "x"}),
                ("GET", "/v1/models", None),
                ("POST", "/tokenize", {"model": "scripted", "prompt": "x"}),
            ):
                response = await http.request(method, path, json=body, headers=headers)
                assert_invalid_key(response)
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/metrics")).status_code == 200


async def test_the_probes_answer_without_a_key(database: AsyncEngine, tmp_path: Path) -> None:
    """The container HEALTHCHECK and the Kubernetes probes send no key; liveness says
    only whether the process is alive and its admission state, nothing of any tenant."""
    async with keyed_app(database, tmp_path / "spool") as (http, _):
        for headers in BAD_HEADERS:
            live = await http.request("GET", "/health/live", headers=headers)
            assert live.status_code == 200, live.text
            assert set(live.json()) == {"status", "state"}
            assert live.json()["status"] == "alive"
            assert (await http.request("GET", "/health", headers=headers)).status_code == 200
        assert_invalid_key(await http.get("/v1/models"))  # the API itself still needs one
    app = create_app(Settings(api_key=("one",)), engine=ScriptedEngine())
    async with AppClient(app, timeout=5) as http:
        assert (await http.get("/health/live")).status_code == 200


async def test_a_revoked_key_stops_working(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        assert (await http.post(URL, json=chat(), headers=bearer(secret))).status_code == 200
        revoked = await http.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN_KEY))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert_invalid_key(await http.post(URL, json=chat(), headers=bearer(secret)))


async def test_revocation_reaches_another_replica_within_a_second(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Two app instances on one database: a key revoked through one stops working on
    the other within the cache's second."""
    async with (
        keyed_app(database, tmp_path / "a") as (first, tenancy),
        keyed_app(database, tmp_path / "b") as (second, _),
    ):
        key_id, secret = await new_key(tenancy)
        assert (await second.post(URL, json=chat(), headers=bearer(secret))).status_code == 200
        await first.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN_KEY))
        revoked_at = asyncio.get_running_loop().time()
        while True:
            response = await second.post(URL, json=chat(), headers=bearer(secret))
            if response.status_code == 401:
                break
            assert response.status_code == 200
            await asyncio.sleep(0.05)
        assert asyncio.get_running_loop().time() - revoked_at <= 1.2
        assert_invalid_key(response)


async def test_a_model_restricted_key(database: AsyncEngine, tmp_path: Path) -> None:
    engine = ScriptedEngine(served_names=("scripted", "other"))
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        _, secret = await new_key(tenancy, models=("other",))
        models = await http.get("/v1/models", headers=bearer(secret))
        assert [m["id"] for m in models.json()["data"]] == ["other"]
        refused = await http.post(URL, json=chat(), headers=bearer(secret))
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "model_not_found"
        allowed = await http.post(URL, json=chat(model="other"), headers=bearer(secret))
        assert allowed.status_code == 200


async def test_fairness_and_priority_follow_the_key(database: AsyncEngine, tmp_path: Path) -> None:
    engine = ScriptedEngine()
    async with keyed_app(database, tmp_path / "spool", engine) as (http, tenancy):
        key_id, secret = await new_key(tenancy, priority=3)
        response = await http.post(
            URL, json=chat(priority=-10, user="anyone"), headers=bearer(secret)
        )
        assert response.status_code == 200
        assert engine.requests[-1].priority == 3  # clamped to the key's tier
        assert engine.requests[-1].client == f"key:{key_id}"
        await http.post(URL, json=chat(priority=7), headers=bearer(secret))
        assert engine.requests[-1].priority == 7  # a lower priority may be asked for


def test_auth_mode_defaults() -> None:
    assert auth_mode(Settings()) == "none"  # loopback
    assert auth_mode(Settings(host="::1")) == "none"
    assert auth_mode(Settings(api_key=("k",))) == "static"
    assert auth_mode(Settings(host="0.0.0.0", auth="none")) == "none"
    assert auth_mode(Settings(host="0.0.0.0", auth="keys")) == "keys"
    with pytest.raises(AuthConfigError, match=r"refusing to serve on 0\.0\.0\.0"):
        auth_mode(Settings(host="0.0.0.0"))
    with pytest.raises(AuthConfigError, match="none, static or keys"):
        auth_mode(Settings(auth="open"))


async def test_static_keys() -> None:
    app = create_app(Settings(api_key=("one", "two")), engine=ScriptedEngine())
    async with AppClient(app, timeout=5) as http:
        for good in ("one", "two"):
            assert (await http.post(URL, json=chat(), headers=bearer(good))).status_code == 200
        assert_invalid_key(await http.post(URL, json=chat(), headers=bearer("three")))
        assert_invalid_key(await http.post(URL, json=chat()))
