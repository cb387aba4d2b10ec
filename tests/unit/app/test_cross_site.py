"""Cross-site requests and secrets: CORS off unless origins are listed, the admin key
from a file or the environment (and gone from the environment once read), failed admin
attempts slowed down, any header text a 401 rather than a 500."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from app.config.settings import Settings
from app.launch.factory import forget_secrets
from app.routes.admin.admission import FailureBackoff
from engine.scripted import ScriptedEngine
from tests.client import app_client

STATUS = "/admin/admission/"
CHAT = "/v1/chat/completions"
BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def quick_backoff(http: httpx.AsyncClient) -> FailureBackoff:
    """The guard's backoff, made fast enough for tests (the same doubling)."""
    route = next(r for r in http.app.routes if r.path.startswith("/admin"))
    guard = next(g for g in route.route_handlers[0].resolve_guards() if hasattr(g, "backoff"))
    guard.backoff.first_s = 0.05
    return guard.backoff


async def test_non_ascii_and_malformed_bearers_are_401() -> None:
    async with app_client(ScriptedEngine(), Settings(admin_key="sésame")) as http:
        quick_backoff(http)
        for header in ("Bearer clé", "Bearer \u00ff\u00fe", "Bearer", "Basic x", "bearer  "):
            response = await http.get(STATUS, headers={"authorization": header.encode("latin-1")})
            assert response.status_code == 401, (header, response.text)
            assert response.json()["error"]["type"] == "authentication_error"
        right = {"authorization": "Bearer sésame".encode()}
        assert (await http.get(STATUS, headers=right)).status_code == 200


async def test_failed_admin_attempts_are_slowed_down_per_client() -> None:
    async with app_client(ScriptedEngine(), Settings(admin_key="k")) as http:
        backoff = quick_backoff(http)
        wrong = {"authorization": "Bearer nope"}
        took = []
        for _ in range(4):
            started = time.perf_counter()
            assert (await http.get(STATUS, headers=wrong)).status_code == 401
            took.append(time.perf_counter() - started)
        # 0.05, 0.1, 0.2, 0.4 s: each failure waits twice the one before (lower bounds
        # only: a loaded machine may add to each answer, never take away).
        assert all(took[i] >= 0.05 * 2**i for i in range(4)), took
        ok = {"authorization": "Bearer k"}
        assert (await http.get(STATUS, headers=ok)).status_code == 200
        assert backoff.failed("testclient") == pytest.approx(0.05)  # success reset it


def test_backoff_is_capped_and_bounded_in_clients() -> None:
    backoff = FailureBackoff(first_s=1, max_s=4, max_clients=2)
    assert [backoff.failed("a") for _ in range(5)] == [1, 2, 4, 4, 4]
    backoff.failed("b")
    backoff.failed("c")  # "a" is forgotten: the oldest of three
    assert backoff.failed("a") == 1


async def test_admin_key_from_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text("from-a-file\n")
    async with app_client(ScriptedEngine(), Settings(admin_key_file=str(key_file))) as http:
        ok = {"authorization": "Bearer from-a-file"}
        assert (await http.get(STATUS, headers=ok)).status_code == 200


def test_missing_or_empty_admin_key_file_is_a_clear_exit(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="admin-key-file"):
        Settings(admin_key_file=str(tmp_path / "absent")).resolved_admin_key()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SystemExit, match="empty"):
        Settings(admin_key_file=str(empty)).resolved_admin_key()


def test_secrets_leave_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LILAC_ADMIN_KEY", "secret")
    monkeypatch.setenv("LILAC_SETTINGS_JSON", '{"admin_key": "secret"}')
    forget_secrets()
    assert "LILAC_ADMIN_KEY" not in os.environ
    assert "LILAC_SETTINGS_JSON" not in os.environ


async def test_cors_is_off_by_default() -> None:
    async with app_client(ScriptedEngine(), Settings()) as http:
        origin = {"origin": "http://evil.example"}
        response = await http.post(CHAT, json=BODY, headers=origin)
        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers
        preflight = await http.options(
            CHAT, headers={**origin, "access-control-request-method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers


async def test_cors_allows_only_the_listed_origins() -> None:
    settings = Settings(allowed_origins=("http://app.example",))
    async with app_client(ScriptedEngine(), settings) as http:
        preflight = await http.options(
            CHAT,
            headers={
                "origin": "http://app.example",
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, authorization",
            },
        )
        assert preflight.status_code in (200, 204), preflight.text
        assert preflight.headers["access-control-allow-origin"] == "http://app.example"
        allowed = await http.post(CHAT, json=BODY, headers={"origin": "http://app.example"})
        assert allowed.headers["access-control-allow-origin"] == "http://app.example"
        other = await http.post(CHAT, json=BODY, headers={"origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
