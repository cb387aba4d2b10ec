"""Whole requests through the app in-process (Litestar + our code) over a scripted engine.

The engine yields its tokens instantly, so what is measured is the HTTP side: routing,
decoding, the chat service, response encoding and SSE framing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from app.main import create_app
from engine.scripted import ScriptedEngine
from perf.harness.sse import read_sse
from perf.micro import payloads
from perf.micro.asgi import post

STREAM_TOKENS = 256
URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app(engine=ScriptedEngine(served_names=(payloads.MODEL,)))


def _run(loop: asyncio.AbstractEventLoop, app: Any, body: bytes) -> tuple[int, list[bytes]]:
    return loop.run_until_complete(post(app, URL, body))


def test_request_non_streamed(benchmark: Any, loop: asyncio.AbstractEventLoop, app: Any) -> None:
    body = payloads.encode(payloads.plain_request())
    status, parts = _run(loop, app, body)
    assert status == 200, parts
    assert msgspec.json.decode(b"".join(parts))["choices"][0]["message"]["content"]
    benchmark(_run, loop, app, body)


def test_request_streamed_per_token(
    benchmark: Any, loop: asyncio.AbstractEventLoop, app: Any
) -> None:
    """One streamed request of STREAM_TOKENS tokens; divide the time by STREAM_TOKENS (the
    compare script does, from extra_info["units"]) for the cost of one streamed token."""
    request = {
        **payloads.plain_request(),
        "max_tokens": STREAM_TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body = payloads.encode(request)
    status, parts = _run(loop, app, body)
    assert status == 200, (status, parts)
    events = len(read_sse(b"".join(parts))) + 1  # read_sse checks [DONE] and leaves it out
    assert events == STREAM_TOKENS + 2, (status, events)  # + usage + [DONE]
    benchmark.extra_info["units"] = STREAM_TOKENS
    benchmark.extra_info["unit"] = "token"
    benchmark(_run, loop, app, body)
