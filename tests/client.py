"""The tests' client side, shared: the app in-process behind an httpx client, and a reader
for the server-sent events of a streamed response.

    async with app_client(engine, settings, probe=probe) as http:
        response = await http.post(URL, json=body)   # http.app is the Litestar app
    chunks = stream_events(response)   # 200, event stream, ends in [DONE], no error event
    events = read_sse(response)        # any body: every event, error events included

`sync_app_client` is the same client for synchronous tests (hypothesis's).

The client does not run the app's lifespan: the engine is the caller's, started and shut
down by the caller (a session-scoped real engine outlives many clients).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from litestar import Litestar

from app.config.settings import Settings
from app.main import create_app
from engine.admission.probes import Probe
from engine.protocol import Engine
from engine.warm.pool import ModelPool
from perf.harness.sse import read_sse

__all__ = [
    "AppClient",
    "SyncAppClient",
    "app_client",
    "assert_no_error_event",
    "read_sse",
    "stream_events",
    "sync_app_client",
]


class AppClient(httpx.AsyncClient):
    """An httpx client whose requests go straight into `app`, in-process."""

    def __init__(self, app: Litestar, *, timeout: float) -> None:
        transport = httpx.ASGITransport(app=app)
        super().__init__(transport=transport, base_url="http://127.0.0.1", timeout=timeout)
        self.app = app


@functools.cache
def scratch_data_dir() -> str:
    """A data directory for apps built with default settings, this process's own: what
    they store (responses) never lands in the user's `~/.local/share/lilac-serve`."""
    path = tempfile.mkdtemp(prefix="lilac-test-data-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@asynccontextmanager
async def app_client(
    engine: Engine | None,
    settings: Settings | None = None,
    *,
    models: ModelPool | None = None,
    probe: Probe | None = None,
    timeout: float = 5.0,
) -> AsyncIterator[AppClient]:
    """The app of `create_app(settings, engine=engine, models=models, probe=probe)`
    behind a client; default settings keep their data in `scratch_data_dir()`."""
    settings = settings or Settings(data_dir=scratch_data_dir())
    app = create_app(settings, engine=engine, models=models, probe=probe)
    async with AppClient(app, timeout=timeout) as client:
        yield client


def assert_no_error_event(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events`, after asserting that none of them is an error event."""
    errors = [event for event in events if "error" in event]
    assert not errors, f"the stream carries error events: {errors}"
    return events


def stream_events(response: httpx.Response, *, allow_error: bool = False) -> list[dict[str, Any]]:
    """The events of a streamed response that must have succeeded: asserts a 200 with an
    event-stream body read whole by `read_sse`, and, unless `allow_error`, that no event
    is an error event (an error after the stream started ends it with a 200)."""
    assert response.status_code == 200, response.text
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith("text/event-stream"), content_type
    events = read_sse(response)
    return events if allow_error else assert_no_error_event(events)


class SyncAppClient:
    """`AppClient` for synchronous tests (hypothesis's): each call runs on its own loop."""

    def __init__(self, client: AppClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.app = client.app
        self._loop = loop

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self.client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


@contextmanager
def sync_app_client(
    engine: Engine,
    settings: Settings | None = None,
    *,
    probe: Probe | None = None,
    timeout: float = 5.0,
) -> Iterator[SyncAppClient]:
    """`app_client`, driven synchronously on an event loop of its own."""
    loop = asyncio.new_event_loop()
    context = app_client(engine, settings, probe=probe, timeout=timeout)
    try:
        client = loop.run_until_complete(context.__aenter__())
        try:
            yield SyncAppClient(client, loop)
        finally:
            loop.run_until_complete(context.__aexit__(None, None, None))
    finally:
        loop.close()


def provided(app: Litestar, name: str) -> Any:
    """The app-wide object create_app hands route handlers as the parameter `name`
    (`host`, `models`, `admission`, `chat`, `tenancy`, ...): what a request gets."""
    return app.dependencies[name].dependency()
