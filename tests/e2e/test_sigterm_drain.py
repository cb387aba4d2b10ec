"""SIGTERM drains before stopping: a real granian server over the scripted engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.client import read_sse
from tests.e2e.server import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVE = (
    "from granian import Granian; from granian.constants import Interfaces;"
    "Granian('tests.e2e.scripted_app:build', factory=True, address='127.0.0.1', port={port},"
    " interface=Interfaces.ASGI, workers=1).serve()"
)


def test_sigterm_ends_streams_with_a_draining_event_then_exits(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TEST_GRACE_PERIOD": "1.0"}
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE.format(port=port)], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
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
            server.send_signal(signal.SIGTERM)
            received += lines
        ended_after = time.monotonic() - signaled
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    events = read_sse("\n".join(received))  # the whole body; ends in data: [DONE]
    error = events[-1]["error"]
    assert error["code"] == "draining"
    assert len(events) > 2  # tokens kept flowing during the grace period ([DONE] not counted)
    assert 0.8 < ended_after < 5.0
