"""The frontend ceiling counts the usage writer's child process beside the worker, and
moves that child alone to the cores `--writer-cores` names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from app.tenancy.db import open_database
from app.tenancy.usage import _values
from app.tenancy.usage_process import ProcessInserts
from perf.load.frontend_ceiling import _pin_writers, _writer_cpu
from tests.unit.app.tenancy.test_usage_bounded import record


async def test_the_writer_cpu_is_its_usage_child_s_only(tmp_path: Path) -> None:
    path = tmp_path / "lilac.db"
    await (await open_database(f"sqlite:///{path}")).dispose()
    # Another test of this process may have left a writer's child running: not this one's.
    earlier = set(_writer_cpu([psutil.Process()]))
    inserts = ProcessInserts(path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        await inserts.insert([_values(record(f"r-{i}")) for i in range(200)])
        counted = _writer_cpu([psutil.Process()])
        assert set(counted) - earlier == {inserts.pid}  # not the other child
        assert counted[inserts.pid] > 0
    finally:
        other.kill()
        other.wait()
        await inserts.close()
    assert set(_writer_cpu([psutil.Process()])) <= earlier


async def test_writer_cores_move_the_writers_child_alone(tmp_path: Path) -> None:
    path = tmp_path / "lilac.db"
    await (await open_database(f"sqlite:///{path}")).dispose()
    mine = os.sched_getaffinity(0)
    target = {min(mine)}
    inserts = ProcessInserts(path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        await inserts.insert([_values(record("pinned"))])  # the child has started
        _pin_writers([psutil.Process()], target)
        assert os.sched_getaffinity(inserts.pid) == target
        assert os.sched_getaffinity(other.pid) == mine
        assert os.sched_getaffinity(0) == mine
    finally:
        other.kill()
        other.wait()
        await inserts.close()
