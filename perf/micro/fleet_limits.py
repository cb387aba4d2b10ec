"""What the fleet's limits cost a request: admit and settle timed one by one, on PostgreSQL.

One key's admit and settle (median, p99, p99.9) through this process's limiter and
through the fleet's on a PostgreSQL database (an empty one: the limiter makes its
tables), with background rounds running as a server runs them.

    python -m perf fleet-limits --database-url postgresql://postgres@/postgres?host=DIR

`busy` is a key whose slice covers every request (rpm 10^9); `tight` one with rpm
6000 over 2 replicas, whose 150-request slice runs short every 150 requests, so that
request waits for a round with the database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time

from sqlalchemy.ext.asyncio import create_async_engine

from app.db.engine import async_url
from app.tenancy.fleet.limit_store import LimitStore
from app.tenancy.fleet.limits import FleetLimiter
from app.tenancy.keys.store import KeyLimits
from app.tenancy.limits import Limiter, RateLimited, RateLimiter

BUSY = KeyLimits(rpm=10**9, tpm=2 * 10**9, max_concurrent=1000)
TIGHT = KeyLimits(rpm=6000, tpm=2 * 10**9, max_concurrent=1000)


async def timed(limiter: RateLimiter, limits: KeyLimits, requests: int) -> list[float]:
    """Microseconds per admit + settle (a refusal counts too: it is the path's cost)."""
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        with contextlib.suppress(RateLimited):
            limiter.settle(await limiter.acquire("k", limits, 100), 50)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def line(name: str, times: list[float]) -> str:
    cuts = statistics.quantiles(times, n=1000)
    median, p99, p999 = statistics.median(times), cuts[989], cuts[998]
    return f"| {name} | {median:.1f} µs | {p99:.1f} µs | {p999:.1f} µs | {len(times)} |"


async def measure(url: str, requests: int) -> None:
    print("| limiter | median | p99 | p99.9 | requests |\n| --- | --- | --- | --- | --- |")
    print(line("one process (`Limiter`)", await timed(Limiter(), BUSY, requests)))
    engines = [create_async_engine(async_url(url)) for _ in range(2)]
    fleet = [FleetLimiter(LimitStore(e, f"r{i}")) for i, e in enumerate(engines)]
    for limiter in fleet * 2:
        await limiter.sync_once()  # both heartbeat: each counts 2 replicas
    for limiter in fleet:
        await limiter.start()
    print(line("fleet, busy key", await timed(fleet[0], BUSY, requests)))
    print(line("fleet, tight key", await timed(fleet[0], TIGHT, min(requests, 5000))))
    rounds = []
    for _ in range(200):
        start = time.perf_counter()
        await fleet[0].sync_once()
        rounds.append((time.perf_counter() - start) * 1e6)
    print(line("a round with PostgreSQL (one key)", rounds))
    for limiter in fleet:
        await limiter.close()
    for engine in engines:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="postgresql://... (empty)")
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args(argv)
    asyncio.run(measure(args.database_url, args.requests))
    return 0
