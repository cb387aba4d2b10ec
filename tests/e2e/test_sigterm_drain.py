"""SIGTERM drains before stopping: a real granian server over the scripted engine."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from perf.harness.servers import ROOT, Server, free_port, scripted_argv
from tests.client import read_sse


def test_sigterm_ends_streams_with_a_draining_event_then_exits(tmp_path: Path) -> None:
    port = free_port()
    env = {"PYTHONPATH": str(ROOT), "TEST_GRACE_PERIOD": "1.0"}
    server = Server(scripted_argv(port, "build"), tmp_path / "server.log", port=port, env=env)
    base = server.base_url
    try:
        server.wait_healthy(60)
        body = {
            "model": "scripted",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 400,  # 20 s of tokens: far beyond the 1 s grace period
            "ignore_eos": True,
        }
        received: list[str] = []
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            for line in lines:
                received.append(line)
                if line.startswith("data: "):
                    break
            signaled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            received += lines
        ended_after = time.monotonic() - signaled
        assert server.process.wait(timeout=30) == 0
    finally:
        server.kill_all()
    events = read_sse("\n".join(received))  # the whole body; ends in data: [DONE]
    error = events[-1]["error"]
    assert error["code"] == "draining"
    assert len(events) > 2  # tokens kept flowing during the grace period ([DONE] not counted)
    assert 0.8 < ended_after < 5.0
