"""A SIGTERM sent to the server's whole process group (systemd's default, `kill -TERM --
-PGID`, Ctrl-C) reaches the HTTP process, which drains, and not the engine's processes:
the engine's own process leads a group of its own, which the processes it starts (vLLM's
engine core and workers, stopped by their own handlers on SIGTERM) inherit.

The host here is a driver process in a session of its own, standing in for the HTTP
process (it ignores the signal, as the drain's handler takes it); its engine, a
scripted one in the engine's process, starts a worker process that SIGTERM would stop.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]

DRIVER = """
import asyncio, os, signal
import psutil
from engine.protocol import ModelInfo
from engine.remote.client import RemoteEngine
from tests.unit.engine.remote.test_process_group import engine_with_a_worker
from tests.unit.engine.remote.test_client import request

async def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: None)  # the drain's handler, in the server
    placeholder = ModelInfo(("scripted",), 0, 0, "scripted")
    remote = RemoteEngine(
        placeholder, engine_with_a_worker, tokens=["a"], token_delay_s=0.02, max_model_len=64
    )
    await remote.start()
    child = psutil.Process(remote.pid)
    [worker] = child.children()
    texts = []

    async def stream() -> None:
        async for output in remote.generate(request(max_tokens=30, long=True)):
            texts.append(output.choices[0].text)

    task = asyncio.create_task(stream())
    await asyncio.sleep(0.1)
    os.killpg(0, signal.SIGTERM)  # the server's whole group
    await task
    await asyncio.sleep(0.2)
    print("tokens", len(texts))
    print("own group", os.getpgid(remote.pid) == remote.pid != os.getpgid(0))
    print("worker alive", worker.status() != psutil.STATUS_ZOMBIE)
    worker.kill()
    await remote.shutdown()

asyncio.run(main())
"""


def engine_with_a_worker(**kwargs: object) -> object:
    """A scripted engine that, as vLLM's does, starts a process that SIGTERM stops."""
    from engine.scripted import ScriptedEngine

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return ScriptedEngine(**kwargs)  # type: ignore[arg-type]


def test_a_signal_to_the_servers_group_leaves_the_engine_running() -> None:
    result = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # its own group: the signal stays within this test
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "tokens 30" in lines, result.stdout  # the stream went on to its end
    assert "own group True" in lines, result.stdout
    assert "worker alive True" in lines, result.stdout
