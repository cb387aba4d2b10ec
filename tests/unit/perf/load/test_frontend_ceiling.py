"""The frontend ceiling counts the usage writer's child process beside the worker, and
moves that child alone to the cores `--writer-cores` names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from app.db.engine import open_database
from app.tenancy.usage.process import ProcessInserts
from app.tenancy.usage.records import record_values
from perf.load.frontend_ceiling import _pin_writers, _writer_cpu
from tests.unit.app.tenancy.usage.test_usage_bounded import record


async def test_the_writer_cpu_is_its_usage_child_s_only(tmp_path: Path) -> None:
    path = tmp_path / "lilac.db"
    await (await open_database(f"sqlite:///{path}")).dispose()
    # Another test of this process may have left a writer's child running: not this one's.
    earlier = set(_writer_cpu([psutil.Process()]))
    inserts = ProcessInserts(path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        await inserts.insert([record_values(record(f"r-{i}")) for i in range(200)])
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
        await inserts.insert([record_values(record("pinned"))])  # the child has started
        _pin_writers([psutil.Process()], target)
        assert os.sched_getaffinity(inserts.pid) == target
        assert os.sched_getaffinity(other.pid) == mine
        assert os.sched_getaffinity(0) == mine
    finally:
        other.kill()
        other.wait()
        await inserts.close()


def test_tenants_are_keys_of_their_own_sent_round_robin() -> None:
    """`--tenants 3`: three keys in the keys database; client i sends key i mod 3."""
    import asyncio
    import shutil

    from app.tenancy.keys.store import KeyStore, hash_key
    from perf.load import frontend_ceiling

    folder = frontend_ceiling._keys_env(3)["LILAC_BENCH_KEYS_DIR"]
    try:
        keys = list(frontend_ceiling.AUTHORIZATIONS)
        assert len(set(keys)) == 3 and keys[0] == frontend_ceiling.AUTHORIZATION
        sent = [frontend_ceiling.authorization_of(client) for client in range(6)]
        assert sent == keys + keys
        request = frontend_ceiling._request(8011, 16, False, sent[1])
        assert sent[1].encode() in request and keys[0].encode() not in request

        async def records() -> list[object]:
            database = await open_database(f"sqlite:///{folder}/lilac.db")
            store = KeyStore(database)
            secrets = [key.split("Bearer ", 1)[1].strip() for key in keys]
            found = await store.by_hashes([hash_key(secret) for secret in secrets])
            await database.dispose()
            return list(found.values())

        assert len(asyncio.run(records())) == 3
    finally:
        shutil.rmtree(folder)
        frontend_ceiling.AUTHORIZATIONS.clear()
        frontend_ceiling.AUTHORIZATION = ""
