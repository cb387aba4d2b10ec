"""A process whose stop stalls writes every thread's stack to stderr, repeatedly, until it
exits; one that stops in time writes nothing."""

from __future__ import annotations

import subprocess
import sys

STALLS = """
import threading, time
from app.observability.stop_stacks import dump_stacks_if_stop_stalls

def held_open():
    time.sleep(1.5)

threading.Thread(target=held_open, name="held-open").start()
dump_stacks_if_stop_stalls(0.4)
"""


def _stderr_of(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stderr


def test_a_stalled_stop_names_the_call_each_thread_waits_in() -> None:
    stderr = _stderr_of(STALLS)
    # The main thread waits at interpreter exit for the non-daemon thread, which sleeps.
    assert stderr.count("Thread 0x") >= 4, stderr  # two threads, dumped twice at least
    assert "in held_open" in stderr and "in _shutdown" in stderr, stderr


def test_a_prompt_stop_writes_nothing() -> None:
    stderr = _stderr_of(
        "from app.observability.stop_stacks import dump_stacks_if_stop_stalls\n"
        "dump_stacks_if_stop_stalls(5.0)\n"
    )
    assert stderr == ""
