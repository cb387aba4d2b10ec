"""Requests leave nothing for the garbage collector: every object a request makes is
freed by reference counting when it ends, whether it succeeded, failed or was left
(tests/garbage.py). Each case below runs against the app with keys on a real SQLite
file, over the scripted engine, with the collector saving what it finds
(`gc.DEBUG_SAVEALL`); what it found of the request path fails the test. The real
engine's requests: tests/integration/test_reference_cycles_real_engine.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar

from app.config.settings import Settings
from app.db.engine import create_engine, open_database
from app.main import create_app
from app.tenancy.keys.store import KeyLimits, KeyStore
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from tests.client import scratch_data_dir
from tests.garbage import Exchange, call, garbage_of

CHAT = "/v1/chat/completions"


def chat(**extra: Any) -> bytes:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi " * 500}]}
    return json.dumps({**body, "max_tokens": 4, **extra}).encode()


def other(model: str, **fields: Any) -> bytes:
    return json.dumps({"model": model, **fields}).encode()


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
MESSAGES = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
# (name, path, body, key, expected status); the key "good", "limited" (one request a
# minute, used up first), "wrong" or None.
CASES: list[tuple[str, str, bytes, str | None, int]] = [
    ("chat", CHAT, chat(), "good", 200),
    ("chat, streamed", CHAT, chat(stream=True), "good", 200),
    ("chat, n and logprobs", CHAT, chat(n=2, logprobs=True, top_logprobs=2), "good", 200),
    ("chat, forced tool", CHAT, chat(tools=[TOOL], tool_choice="required"), "good", 200),
    ("chat, json_object", CHAT, chat(response_format={"type": "json_object"}), "good", 200),
    ("completions", "/v1/completions", other("scripted", prompt="hi", max_tokens=4), "good", 200),
    (
        "completions, streamed",
        "/v1/completions",
        other("scripted", prompt="hi", max_tokens=4, stream=True),
        "good",
        200,
    ),
    ("messages", "/v1/messages", other("scripted", **MESSAGES), "good", 200),
    ("messages, streamed", "/v1/messages", other("scripted", stream=True, **MESSAGES), "good", 200),
    ("responses", "/v1/responses", other("scripted", input="hi", max_output_tokens=4), "good", 200),
    (
        "responses, streamed",
        "/v1/responses",
        other("scripted", input="hi", max_output_tokens=4, stream=True),
        "good",
        200,
    ),
    ("tokenize", "/tokenize", other("scripted", prompt="hi"), "good", 200),
    ("malformed JSON", CHAT, b'{"model": "scripted", "messages": [' + b"x" * 5000, "good", 400),
    ("wrong type", CHAT, other("scripted", messages="x" * 5000), "good", 400),
    ("out of range", CHAT, chat(temperature=9), "good", 400),
    ("over the context", CHAT, chat(max_tokens=10**9), "good", 400),
    ("unknown model", CHAT, chat(model="nope"), "good", 404),
    ("unknown model, streamed", CHAT, chat(model="nope", stream=True), "good", 404),
    ("unknown model, completions", "/v1/completions", other("nope", prompt="hi"), "good", 404),
    ("unknown model, messages", "/v1/messages", other("nope", **MESSAGES), "good", 404),
    ("unknown model, responses", "/v1/responses", other("nope", input="hi"), "good", 404),
    ("wrong key", CHAT, chat(), "wrong", 401),
    ("no key", CHAT, chat(), None, 401),
    ("rate limited", CHAT, chat(), "limited", 429),
    ("rate limited, streamed", CHAT, chat(stream=True), "limited", 429),
]


@asynccontextmanager
async def keyed_app(tmp_path: Path) -> AsyncIterator[tuple[Litestar, dict[str, str]]]:
    """The app, running, and the `Authorization` header of each key in `CASES`."""
    url = f"sqlite:///{tmp_path}/lilac.db"
    database = await open_database(url)
    store = KeyStore(database)
    keys = {
        "good": (await store.create("good", KeyLimits(rpm=10**6)))[1],
        "limited": (await store.create("limited", KeyLimits(rpm=1)))[1],
        "wrong": "sk-lilac-" + "0" * 40,
    }
    await database.dispose()
    tenancy = Tenancy.with_database(create_engine(url), tmp_path / "spool.jsonl")
    settings = Settings(data_dir=scratch_data_dir(), auth="keys")
    app = create_app(settings, engine=ScriptedEngine(token_delay_s=0.001), tenancy=tenancy)
    async with app.lifespan():
        yield app, {name: f"Bearer {secret}" for name, secret in keys.items()}


async def test_no_request_leaves_a_reference_cycle(tmp_path: Path) -> None:
    async with keyed_app(tmp_path) as (app, keys):
        left = await cycles_by_case(app, keys)
    assert not left, f"requests left reference cycles: {left}"


async def cycles_by_case(app: Litestar, keys: dict[str, str]) -> dict[str, list[str]]:
    """What each case left; each gets the status it should (checked on every run)."""
    await call(app, CHAT, Exchange(chat()), keys["limited"])  # its one request this minute
    left: dict[str, list[str]] = {}
    for name, path, body, key, status in CASES:
        found = await garbage_of(
            one_case(app, name, path, body, keys[key] if key else None, status)
        )
        if found:
            left[name] = found
    return left


def one_case(
    app: Litestar, name: str, path: str, body: bytes, authorization: str | None, status: int
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        exchange = Exchange(body)
        await call(app, path, exchange, authorization)
        assert exchange.status == status, f"{name}: {exchange.status}"
        assert exchange.finished.is_set(), f"{name}: the response did not end"

    return run


@pytest.mark.parametrize("leave_after", [0, 2])
async def test_a_client_that_leaves_leaves_no_reference_cycle(
    tmp_path: Path, leave_after: int
) -> None:
    """Gone before the first byte (a non-streamed request still generating), or after
    two frames of a stream."""
    stream = leave_after > 0
    body = chat(max_tokens=50, stream=stream, ignore_eos=True)
    exchanges: list[Exchange] = []

    async with keyed_app(tmp_path) as (app, keys):

        async def run() -> None:
            exchange = Exchange(body, leave_after)
            await call(app, CHAT, exchange, keys["good"])
            exchanges.append(exchange)

        found = await garbage_of(run)
        assert found == [], "\n".join(found)
    for exchange in exchanges:  # each left before the end of its response
        assert not exchange.finished.is_set()
        assert len(exchange.parts) == leave_after
