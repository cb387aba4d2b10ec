"""A client that leaves frees its engine work within a second, wherever it leaves: before
its first token, mid-stream, or waiting on a non-streamed answer, and for every
sub-request (`n > 1`, several prompts). Raw sockets that close; the engine's own count
of unfinished requests (`/metrics`) says when the work is gone."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server

FREED_WITHIN_S = 1.0
LONG = {"max_tokens": 400, "ignore_eos": True, "temperature": 1.0}
CHAT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def send(
    server: Server, path: str, body: dict[str, object], key: str | None = None
) -> socket.socket:
    """A raw HTTP/1.1 POST (with `key`, as its bearer); the caller reads what it wants
    and closes."""
    url = urlsplit(server.base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=60)
    payload = json.dumps(body).encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    sock.sendall(head + payload)
    return sock


def wait_for(condition: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `condition` held; fails after `timeout_s`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
    return time.monotonic() - start


def leave_and_time(server: Server, sock: socket.socket) -> float:
    """Close the client's socket; seconds until the engine holds nothing (printed: `-s`)."""
    sock.close()
    freed_s = wait_for(lambda: server.unfinished_requests() == 0, 30.0)
    print(f"\nengine work freed {freed_s:.2f} s after the client left")
    return freed_s


def engine_holds(server: Server, count: int) -> None:
    wait_for(lambda: server.unfinished_requests() >= count, 60.0)


@pytest.fixture(autouse=True)
def idle_engine(server: Server) -> None:
    wait_for(lambda: server.unfinished_requests() == 0, 60.0)


def chat(**extra: object) -> dict[str, object]:
    return {"model": DEFAULT_MODEL_NAME, "messages": CHAT, **LONG, **extra}


@pytest.mark.parametrize(("n", "stream"), [(1, False), (3, False), (3, True)])
def test_a_client_gone_before_any_output_frees_its_work(
    server: Server, n: int, stream: bool
) -> None:
    """Non-streamed (the answer would come at the end), or a stream before its first
    byte: nothing is written to notice the closed socket by; every choice is aborted."""
    sock = send(server, "/v1/chat/completions", chat(n=n, stream=stream))
    engine_holds(server, 1)
    assert leave_and_time(server, sock) < FREED_WITHIN_S


def test_a_client_gone_mid_stream_frees_its_work(server: Server) -> None:
    sock = send(server, "/v1/chat/completions", chat(stream=True, n=2))
    received = b""
    while received.count(b"data: ") < 4:
        received += sock.recv(65536)
    assert received.startswith(b"HTTP/1.1 200")
    assert leave_and_time(server, sock) < FREED_WITHIN_S


def test_a_multi_prompt_completion_gone_frees_every_prompt(server: Server) -> None:
    body = {"model": DEFAULT_MODEL_NAME, "prompt": ["Once upon a time"] * 4, **LONG}
    sock = send(server, "/v1/completions", body)
    engine_holds(server, 4)
    assert leave_and_time(server, sock) < FREED_WITHIN_S


def test_a_client_gone_right_after_sending_frees_its_work(server: Server) -> None:
    """Gone before admission or the first step: whatever it reached is ended."""
    sock = send(server, "/v1/chat/completions", chat(stream=True))
    assert leave_and_time(server, sock) < FREED_WITHIN_S + 1.0  # it may not have started
    time.sleep(0.5)
    assert server.unfinished_requests() == 0  # and nothing starts after it left
