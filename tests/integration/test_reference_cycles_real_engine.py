"""The real engine's requests leave nothing for the garbage collector either (the app's
side over the scripted engine: tests/unit/app/test_reference_cycles.py): completed,
streamed, refused, and left by their client before the first byte or mid-stream, no
object of the app's, the engine's or vLLM's stays in a reference cycle."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.client import AppClient
from tests.garbage import Exchange, call, garbage_of

CHAT = "/v1/chat/completions"


def chat(**extra: Any) -> bytes:
    body = {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}]}
    return json.dumps({**body, "max_tokens": 4, "temperature": 0, **extra}).encode()


def exchange_of(
    client: AppClient, body: bytes, status: int, leave_after: int | None = None
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        exchange = Exchange(body, leave_after)
        await call(client.app, CHAT, exchange, None)
        assert exchange.status == status
        assert exchange.finished.is_set() == (leave_after is None)

    return run


@pytest.mark.parametrize(
    ("body", "status", "leave_after"),
    [
        (chat(), 200, None),
        (chat(stream=True), 200, None),
        (chat(max_tokens=10**6), 400, None),  # over the context
        (chat(max_tokens=64, ignore_eos=True), 0, 0),  # gone before the first byte: no answer
        (chat(max_tokens=64, ignore_eos=True, stream=True), 200, 2),  # gone mid-stream
    ],
    ids=["completed", "streamed", "refused", "left-before-answer", "left-mid-stream"],
)
async def test_real_requests_leave_no_reference_cycle(
    real_client: AppClient, body: bytes, status: int, leave_after: int | None
) -> None:
    found = await garbage_of(exchange_of(real_client, body, status, leave_after), times=3)
    assert found == [], "\n".join(found)
