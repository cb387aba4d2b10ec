"""What tenancy costs a request: the same non-streamed request through the app with
`--auth keys` (a real SQLite keys database, the key's limits on, its usage row
committed before the response) and without keys. The difference of the two medians
is the per-request overhead of authentication, limits and metering."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.db.engine import open_database
from app.main import create_app
from app.tenancy.consumes import Consumes
from app.tenancy.keys.store import KeyLimits
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from perf.micro import payloads
from perf.micro.asgi import post

URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    # The current loop too: a key lookup started outside it (run_once below drives a
    # coroutine by hand) schedules its database query on this loop.
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture(scope="module")
def keyed(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[Any, list[tuple[bytes, bytes]]]]:
    folder = Path(tempfile.mkdtemp(prefix="lilac-bench-"))

    async def build() -> tuple[Tenancy, str]:
        database = await open_database(f"sqlite:///{folder}/lilac.db")
        tenancy = Tenancy.with_database(database, folder / "spool.jsonl")
        assert tenancy.store is not None
        limits = KeyLimits(rpm=10**9, tpm=10**12, max_concurrent=1000)
        _, secret = await tenancy.store.create("bench", limits)
        return tenancy, secret

    tenancy, secret = loop.run_until_complete(build())
    engine = ScriptedEngine(served_names=(payloads.MODEL,))
    app = create_app(engine=engine, tenancy=tenancy)
    yield app, [(b"authorization", f"Bearer {secret}".encode())]
    loop.run_until_complete(tenancy.close())


def _run(loop: asyncio.AbstractEventLoop, app: Any, body: bytes, headers: Any) -> int:
    status, parts = loop.run_until_complete(post(app, URL, body, headers))
    assert status == 200, parts
    return len(parts)


def test_request_keys_off(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    app = create_app(engine=ScriptedEngine(served_names=(payloads.MODEL,)))
    body = payloads.encode(payloads.plain_request())
    benchmark(_run, loop, app, body, None)


def test_request_keys_on(benchmark: Any, loop: asyncio.AbstractEventLoop, keyed: Any) -> None:
    """Includes committing the usage row (SQLite, synchronous=FULL) before the response."""
    app, headers = keyed
    body = payloads.encode(payloads.plain_request())
    status, parts = loop.run_until_complete(post(app, URL, body, headers))
    assert status == 200 and msgspec.json.decode(b"".join(parts))["usage"]
    benchmark(_run, loop, app, body, headers)


def test_tenancy_checks_alone(benchmark: Any, loop: asyncio.AbstractEventLoop, keyed: Any) -> None:
    """Authentication (cached key), the limits and building the usage record: the part
    of tenancy on the request's own path besides the database commit."""
    app, headers = keyed
    tenancy: Tenancy = app.dependencies["tenancy"].dependency()  # what handlers get
    header = headers[0][1]

    async def checks() -> None:
        key = await tenancy.auth.authenticate(header)
        assert key is not None
        meter = await tenancy.admit(key, Consumes(URL, payloads.MODEL, tokens=100, slots=1))
        assert meter is not None
        tenancy.limiter.headers(key.id, key.limits)
        record = meter.record("completed")
        assert meter.reservation is not None
        tenancy.limiter.settle(meter.reservation, record.prompt_tokens)

    def run_once() -> None:
        # A cached key awaits nothing: drive the coroutine directly, without the event
        # loop's own per-call cost. Once a second the cache expires and the key is read
        # again from the database: that round goes through the loop.
        coroutine = checks()
        try:
            coroutine.send(None)
        except StopIteration:
            return
        coroutine.close()
        loop.run_until_complete(checks())

    loop.run_until_complete(checks())
    benchmark(run_once)
