"""What keeping many keys' records fresh costs: the key cache's reads of the database.

A key's record is read again once it is a second old (app.tenancy.keys.auth). With many
tenants sending at once, that is a read per key each second. This command makes
`--keys` keys in a real SQLite keys database, then authenticates them round robin for
`--seconds`, as a server's requests would, and reports the database reads each second
and the CPU they cost this process (all its threads, and the event loop's alone), per
second and per key; and the requests that waited for a read (each second: those whose
check took over `WAITED_S`, a read of the database; a cached key's takes microseconds),
with the longest such wait.

    python -m perf key-refresh [--keys 64] [--seconds 5] [--requests-per-s 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from app.db.engine import open_database
from app.tenancy.keys.auth import DatabaseKeys
from app.tenancy.keys.store import KeyLimits, KeyStore

WARM_UP_S = 2.5  # past two reads of every key (a read each second)
WAITED_S = 1e-4


def _count_key_reads(engine: Any) -> list[int]:
    reads = [0]

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM api_keys" in statement and "key_hash" in statement:
            reads[0] += 1

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    return reads


async def measure(keys: int, seconds: float, rate: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lilac-key-refresh-") as folder:
        return await _measure(Path(folder), keys, seconds, rate)


async def _measure(folder: Path, keys: int, seconds: float, rate: float) -> dict[str, float]:
    database = await open_database(f"sqlite:///{folder}/lilac.db")
    store = KeyStore(database)
    limits = KeyLimits(rpm=10**9, tpm=10**12)
    headers = [f"Bearer {(await store.create(f'k{i}', limits))[1]}".encode() for i in range(keys)]
    # The same requests with the cache never going stale: what the reads add to them.
    baseline = await _run(DatabaseKeys(store, ttl_s=1e9), headers, seconds, rate)
    auth = DatabaseKeys(store)
    # Known to the cache and read again a few times, as a running server's keys are.
    await _run(auth, headers, WARM_UP_S, rate)
    reads = _count_key_reads(database)
    timed = await _run(auth, headers, seconds, rate)
    await database.dispose()
    reads_per_s = reads[0] / timed["wall_s"]
    process_ms = 1000 * (timed["process_s"] - baseline["process_s"]) / timed["wall_s"]
    loop_ms = 1000 * (timed["loop_s"] - baseline["loop_s"]) / timed["wall_s"]
    return {
        "keys": keys,
        "requests": timed["requests"],
        "database_reads_per_s": round(reads_per_s, 1),
        "cpu_ms_per_s": round(process_ms, 2),
        "loop_cpu_ms_per_s": round(loop_ms, 2),
        "cpu_us_per_key_per_s": round(1000 * process_ms / keys, 1),
        "waited_per_s": round(timed["waited"] / timed["wall_s"], 1),
        "longest_wait_ms": round(1000 * timed["longest_s"], 2),
    }


async def _run(
    auth: DatabaseKeys, headers: list[bytes], seconds: float, rate: float
) -> dict[str, float]:
    for header in headers:  # each key read once, before the clock starts
        await auth.authenticate(header)
    gap = 1.0 / rate
    process0, loop0, start = time.process_time(), time.thread_time(), time.monotonic()
    requests = waited = 0
    longest = 0.0
    while time.monotonic() - start < seconds:
        for header in headers:
            asked = time.perf_counter()
            await auth.authenticate(header)
            took = time.perf_counter() - asked
            if took > WAITED_S:
                waited += 1
                longest = max(longest, took)
            requests += 1
            # Paced as requests arrive (a busy server's loop runs other work between).
            next_at = start + requests * gap
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
    return {
        "requests": requests,
        "wall_s": time.monotonic() - start,
        "process_s": time.process_time() - process0,
        "loop_s": time.thread_time() - loop0,
        "waited": waited,
        "longest_s": longest,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--requests-per-s", type=float, default=3000.0)
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.keys, args.seconds, args.requests_per_s))
    print(" ".join(f"{name}={value}" for name, value in figures.items()))
    return 0
