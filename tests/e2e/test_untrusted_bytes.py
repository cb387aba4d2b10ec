"""Untrusted bytes against the real server `make serve` starts: the JSON body that a
backtracking scan took seconds over is a quick 400 while /health keeps answering, and
a client that leaves halfway through sending its body is logged as a client that left.

Latencies are printed (run with -s to read them); the only bound asserted is a generous
one that the old stall (about 7 s) would break."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from urllib.parse import urlsplit

import httpx

from perf.harness.corpus import unclosed_escaped_string
from perf.harness.servers import Server

CHAT = "/v1/chat/completions"
GENEROUS_S = 2.0


async def _attack_and_poll(base_url: str) -> tuple[httpx.Response, float, list[float]]:
    body = unclosed_escaped_string(32_000)
    assert len(body) <= 64 * 1024
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        await http.get("/health")  # connections warm: the latencies are the server's
        health: list[float] = []
        stop = asyncio.Event()

        async def poll() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                answer = await http.get("/health")
                health.append(time.perf_counter() - started)
                assert answer.status_code == 200
                await asyncio.sleep(0.01)

        poller = asyncio.create_task(poll())
        await asyncio.sleep(0.1)
        started = time.perf_counter()
        response = await http.post(CHAT, content=body, headers={"content-type": "application/json"})
        took = time.perf_counter() - started
        await asyncio.sleep(0.1)
        stop.set()
        await poller
    return response, took, health


def test_the_unclosed_string_body_is_a_quick_400_and_health_answers(
    server: Server,
) -> None:
    response, took, health = asyncio.run(_attack_and_poll(server.base_url))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "json_too_deep"
    print(
        f"\n64 KiB unclosed string: 400 in {1000 * took:.1f} ms; /health max "
        f"{1000 * max(health):.1f} ms over {len(health)} polls"
    )
    assert took < GENEROUS_S
    assert health and max(health) < GENEROUS_S


def _half_body_then_close(base_url: str, request_id: str) -> None:
    where = urlsplit(base_url)
    body = b'{"model": "x", "messages": [{"role": "user", "content": "' + b"a" * 4000 + b'"}]}'
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: {where.hostname}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Request-Id: {request_id}\r\n\r\n"
    ).encode()
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(head + body[: len(body) // 2])
        time.sleep(0.3)  # the server is reading the body when the client goes


def _access_line(log: str, request_id: str) -> str | None:
    for line in log.splitlines():
        if f"[{request_id}]" in line and "endpoint=" in line:
            return line
    return None


def _posts_by_status(metrics: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    pattern = re.compile(r"^lilac_http_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
    for line in metrics.splitlines():
        match = pattern.match(line)
        if match and 'route="/v1/chat/completions"' in match["labels"]:
            status = re.search(r'status="(\d+)"', match["labels"])
            if status and 'method="POST"' in match["labels"]:
                counts[status[1]] = counts.get(status[1], 0) + float(match["value"])
    return counts


def test_a_client_gone_mid_body_is_logged_as_gone(server: Server) -> None:
    before_log = server.log_path.stat().st_size
    before = _posts_by_status(server.metrics_text())
    ids = [f"half-body-{i}" for i in range(3)]
    for request_id in ids:
        _half_body_then_close(server.base_url, request_id)
    deadline = time.monotonic() + 10
    while True:
        log = server.log_path.read_bytes()[before_log:].decode(errors="replace")
        lines = [_access_line(log, request_id) for request_id in ids]
        if all(lines) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(lines), log[-4000:]
    for line in lines:
        assert line is not None and "status=499" in line and "outcome=client_disconnected" in line
    assert "Traceback" not in log and "unhandled error" not in log, log[-4000:]
    after = _posts_by_status(server.metrics_text())
    assert after.get("500", 0) == before.get("500", 0)
    assert after.get("499", 0) - before.get("499", 0) == len(ids)
