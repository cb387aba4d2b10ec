"""Connections that send half a body and stop, against a real granian server over the
scripted engine: past the per-client bound they get a 429 at once, the rest a 408 at
the read timeout, and every one is closed by the server; meanwhile another client is
answered normally, and the same client's GETs too (they are not counted)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx

from perf.harness.servers import Server
from perf.scenarios.slow_bodies import (
    CHAT,
    latencies,
    open_many,
    scripted_server,
    watch,
)

CONNECTIONS = 100
PER_CLIENT = 20
TIMEOUT_S = 2.0
SLACK_S = 3.0


def _port(server: Server) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def test_half_sent_bodies_are_refused_or_timed_out_and_closed(tmp_path: Path) -> None:
    server = scripted_server(tmp_path, TIMEOUT_S, PER_CLIENT, log_level="info")
    try:
        sockets = open_many("127.0.0.1", _port(server), CONNECTIONS)
        opened = time.monotonic()
        # Another loopback address (`OTHER_ADDRESS`) is another client: answered.
        assert max(latencies(server.base_url, 3)) < 1.0
        looking = httpx.get(f"{server.base_url}/v1/models", timeout=5)
        assert looking.status_code == 200  # the same address: GETs are not counted
        watch(sockets, opened + TIMEOUT_S + SLACK_S)
        outcomes = list(sockets.values())
        for sock in sockets:
            sock.close()
    finally:
        server.kill_all()
    assert all(o.closed_after_s is not None for o in outcomes)  # every one closed
    statuses = sorted(o.status or 0 for o in outcomes)
    assert statuses == [408] * PER_CLIENT + [429] * (CONNECTIONS - PER_CLIENT)
    for outcome in outcomes:
        head, _, body = outcome.received.partition(b"\r\n\r\n")
        assert b"\r\nconnection: close" in head.lower()
        error = json.loads(body)["error"]
        if outcome.status == 429:
            assert error["code"] == "too_many_bodies_in_flight"
            assert outcome.closed_after_s is not None and outcome.closed_after_s < 1.0
        else:
            assert error == {
                "message": error["message"],
                "type": "invalid_request_error",
                "param": None,
                "code": "request_timeout",
            }
            assert outcome.closed_after_s is not None
            assert TIMEOUT_S - 0.1 <= outcome.closed_after_s <= TIMEOUT_S + SLACK_S
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log
    assert log.count("status=408") == PER_CLIENT, log[-3000:]


def test_a_body_that_keeps_coming_slowly_is_answered(tmp_path: Path) -> None:
    server = scripted_server(tmp_path, 0.5, PER_CLIENT)
    try:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close"
                f"\r\nContent-Type: application/json\r\nContent-Length: {len(CHAT)}\r\n\r\n"
            ).encode()
            sock.sendall(head)
            for i in range(0, len(CHAT), 16):  # 0.3 s between pieces, 2 s in all
                time.sleep(0.3)
                sock.sendall(CHAT[i : i + 16])
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
    finally:
        server.kill_all()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:500]
