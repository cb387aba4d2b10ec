"""The engine core process dies under load: requests in flight end cleanly (a 500
`server_error`, or an SSE error event then `[DONE]`), /health says why with a 503, and
the server exits non-zero within seconds so that its supervisor restarts it."""

from __future__ import annotations

import asyncio
import time

import httpx
import psutil

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server

EXIT_WITHIN_S = 10.0
BODY = {
    "model": DEFAULT_MODEL_NAME,
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 300,
    "ignore_eos": True,
}


def engine_core(server: Server) -> psutil.Process:
    for child in psutil.Process(server.process.pid).children(recursive=True):
        if "EngineCore" in " ".join(child.cmdline()):
            return child
    raise AssertionError("no engine core process under the server")


async def in_flight(client: httpx.AsyncClient, stream: bool) -> tuple[int, str]:
    if not stream:
        response = await client.post("/v1/chat/completions", json=BODY)
        return response.status_code, response.text
    async with client.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}) as r:
        return r.status_code, "".join([line + "\n" async for line in r.aiter_lines()])


async def kill_under_load(server: Server) -> tuple[list[tuple[int, str]], httpx.Response]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
        tasks = [asyncio.create_task(in_flight(client, stream=i % 2 == 1)) for i in range(6)]
        while server.unfinished_requests() < 6:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # streams are under way
        engine_core(server).kill()
        endings = await asyncio.gather(*tasks)
        health = await client.get("/health")
    return endings, health


def test_killed_engine_core_ends_requests_reports_and_exits(dying_server: Server) -> None:
    server = dying_server  # killed: the fixture cleans up what is left of it
    endings, health = asyncio.run(kill_under_load(server))
    killed_at = time.monotonic()
    for status, text in endings:
        if status == 200:  # a stream: the error event, then [DONE]
            assert '"type":"server_error"' in text, text[-500:]
            assert text.rstrip().endswith("data: [DONE]"), text[-200:]
        else:
            assert status == 500, text
            assert '"type":"server_error"' in text
    assert health.status_code == 503
    error = health.json()["error"]
    assert error["code"] == "engine_dead"
    assert error["message"].startswith("The engine failed (")
    code = server.process.wait(timeout=EXIT_WITHIN_S)
    exit_s = time.monotonic() - killed_at
    print(f"\nserver exited {code} {exit_s:.2f} s after the in-flight requests ended")
    assert code != 0
    log = server.log_path.read_text()
    assert "engine failed: " in log
