"""Two real server processes with `--auth keys` on one real PostgreSQL server, and two
on one SQLite file: a key's requests per minute hold across both (not twice over),
under a flood of real HTTP clients on both; and with PostgreSQL stopped each still
refuses past its share.

The servers run the scripted engine (seconds to start): the limits are the HTTP side's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config.sources import parse_args
from app.db.engine import open_database
from app.tenancy.keys.store import KeyLimits, KeyStore
from perf.harness.servers import free_port, scripted_argv
from perf.scenarios.fleet import _settings_json
from tests.postgres import TempPostgres, start_postgres

ROOT = Path(__file__).resolve().parents[2]
RPM = 20
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def _make_key(url: str) -> str:
    engine = await open_database(url)
    try:
        _, secret = await KeyStore(engine).create("fleet", KeyLimits(rpm=RPM))
    finally:
        await engine.dispose()
    return secret


def _start(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    flags = ["--auth", "keys", "--database-url", url, "--port", str(port),
             "--limit-sync-interval-s", "0.2"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["LILAC_SETTINGS_JSON"] = json.dumps(_settings_json(parse_args(flags)))
    with log.open("wb") as out:
        command = scripted_argv(port, "build")
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TempPostgres, list[str], str]]:
    pg = start_postgres()
    try:
        with _replicas(pg.url(), tmp_path_factory.mktemp("fleet-limits")) as (urls, secret):
            yield pg, urls, secret
    finally:
        pg.stop()


@pytest.fixture(scope="module")
def sqlite_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    """Two replicas of one host sharing one SQLite file."""
    folder = tmp_path_factory.mktemp("fleet-limits-sqlite")
    with _replicas(f"sqlite:///{folder}/lilac.db", folder) as replicas:
        yield replicas


@contextlib.contextmanager
def _replicas(url: str, folder: Path) -> Iterator[tuple[list[str], str]]:
    """Two replicas on the database at `url`, ready, and a key of `RPM` on it."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        secret = asyncio.run(_make_key(url))
        ports = [free_port(), free_port()]
        processes = [_start(url, p, folder / f"replica-{p}.log") for p in ports]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        deadline = time.monotonic() + 300
        for url, process in zip(urls, processes, strict=True):
            while True:
                assert process.poll() is None, folder / "replica.log"
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "replica not ready"
                time.sleep(0.3)
        yield urls, secret
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def _flood(urls: list[str], secret: str, seconds: float, clients: int = 3) -> dict[str, list[int]]:
    """`clients` threads per replica sending chat requests back to back."""
    statuses: dict[str, list[int]] = {url: [] for url in urls}
    end = time.monotonic() + seconds

    def client(url: str) -> None:
        with httpx.Client(headers={"authorization": f"Bearer {secret}"}, timeout=10) as http:
            while time.monotonic() < end:
                response = http.post(f"{url}/v1/chat/completions", json=CHAT)
                statuses[url].append(response.status_code)
                if response.status_code == 429:
                    assert response.headers["retry-after"]
                    assert response.json()["error"]["code"] == "rate_limit_exceeded"
                else:
                    assert response.status_code == 200, response.text
                    assert response.headers["x-ratelimit-limit-requests"] == str(RPM)

    threads = [threading.Thread(target=client, args=(u,)) for u in urls for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def _holds_across(urls: list[str], secret: str) -> None:
    """A flood on both replicas gets what one server would allow, not twice that."""
    seconds = 6.0
    started = time.monotonic()
    statuses = _flood(urls, secret, seconds)
    elapsed = time.monotonic() - started
    allowed = {url: codes.count(200) for url, codes in statuses.items()}
    print(f"\nrpm {RPM}, 2 replicas, {elapsed:.1f} s of flooding: allowed {allowed}, "
          f"refused {sum(c.count(429) for c in statuses.values())}")  # fmt: skip
    # One server would allow a full bucket plus the refill meanwhile; two counting
    # alone would allow twice that.
    one_server = RPM + elapsed * RPM / 60
    assert sum(allowed.values()) <= one_server + RPM * 0.05 + 2
    assert sum(allowed.values()) >= RPM * 0.9
    assert all(count > 0 for count in allowed.values())


def test_a_keys_requests_per_minute_hold_across_two_replicas_on_one_sqlite_file(
    sqlite_fleet: tuple[list[str], str],
) -> None:
    _holds_across(*sqlite_fleet)


def test_a_keys_requests_per_minute_hold_across_two_replicas(
    fleet: tuple[TempPostgres, list[str], str],
) -> None:
    pg, urls, secret = fleet
    _holds_across(urls, secret)

    # The database stops: each replica counts its share alone, never unlimited.
    pg.halt()
    try:
        time.sleep(1.0)  # a round fails
        statuses = _flood(urls, secret, 3.0)
    finally:
        pg.resume()
    allowed_alone = [codes.count(200) for codes in statuses.values()]
    print(f"store stopped, 3 s of flooding: allowed {allowed_alone}")
    # Each: a share of 10 a minute, from a drained bucket: about half a request in 3 s.
    assert all(count <= 2 for count in allowed_alone)
    assert all(429 in codes for codes in statuses.values())
