"""The `Host` guard of a server without keys: loopback names, IP literals, the bound
address and `--allowed-hosts` are answered; any other name, or none, gets a 403
`host_not_allowed` in OpenAI's envelope before anything else runs. The health probes
answer any name, and a server with keys has no guard (every request proves itself)."""

from __future__ import annotations

import httpx
import pytest

from app.config.settings import Settings
from app.main import create_app
from app.transport.hosts import AllowedHosts, host_name
from engine.scripted import ScriptedEngine
from tests.client import scratch_data_dir


@pytest.mark.parametrize(
    "header, name",
    [
        (b"localhost:8000", "localhost"),
        (b"LocalHost.", "localhost"),
        (b"[::1]:8000", "::1"),
        (b"127.0.0.1", "127.0.0.1"),
        (b"evil.example:80", "evil.example"),
        (b"", ""),
        (b"[::1", ""),
    ],
)
def test_the_name_of_a_host_header(header: bytes, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    "header, allowed",
    [
        (b"localhost:8000", True),
        (b"api.localhost", True),
        (b"127.0.0.1:8000", True),
        (b"10.1.2.3", True),  # an IP literal: no name to rebind
        (b"[::1]:8000", True),
        (b"box.lan:8000", True),  # --allowed-hosts
        (b"gpu-host", True),  # the bound address, as a name
        (b"rebind.attacker.example", False),
        (b"localhost.attacker.example", False),
        (b"", False),
        (b":8000", False),
        (None, False),
    ],
)
def test_which_hosts_are_allowed(header: bytes | None, allowed: bool) -> None:
    assert AllowedHosts("gpu-host", ["Box.LAN"]).allows(header) is allowed


def client(settings: Settings, host: str) -> httpx.AsyncClient:
    app = create_app(settings, engine=ScriptedEngine(["ok"]))
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url=f"http://{host}")


async def test_a_keyless_server_answers_only_allowed_hosts() -> None:
    settings = Settings(data_dir=scratch_data_dir(), allowed_hosts=("box.lan",))
    for host, status in [
        ("127.0.0.1:8000", 200),
        ("localhost:8000", 200),
        ("box.lan", 200),
        ("rebind.attacker.example", 403),
    ]:
        async with client(settings, host) as http:
            response = await http.get("/v1/models")
        assert response.status_code == status, (host, response.text)
        if status == 403:
            error = response.json()["error"]
            assert error["code"] == "host_not_allowed" and error["type"] == "permission_error"
    async with client(settings, "rebind.attacker.example") as http:
        assert (await http.get("/health/live")).status_code == 200  # probes: any name
        chat = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert (await http.post("/v1/chat/completions", json=chat)).status_code == 403


async def test_a_server_with_keys_has_no_host_guard() -> None:
    settings = Settings(data_dir=scratch_data_dir(), auth="static", api_key=("k" * 32,))
    async with client(settings, "any.example") as http:
        response = await http.get("/v1/models", headers={"Authorization": "Bearer " + "k" * 32})
    assert response.status_code == 200, response.text
