"""Every way a keyed request can end leaves exactly one usage row, with the tokens the
engine counted and the right outcome, and gives its key's concurrency slot back: the
client gone before its first token, when the stream's headers go out (its body never
started), mid-stream, or waiting on a non-streamed answer; a 400 after admission leaves a refusal
count instead.

Each request runs through the app's ASGI interface with a client that leaves the way
granian reports it (tests/asgi_call.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from tests.asgi_call import Leave, asgi_call
from tests.unit.app.tenancy.helpers import (
    ADMIN_KEY,
    URL,
    bearer,
    chat,
    new_key,
    refusal_counts,
    usage_rows,
)

WORDS = tuple(f" w{i}" for i in range(40))
PROMPT_TOKENS = 2 + 3  # the scripted engine: a word a token, 3 per message ("hi there")


async def run(
    database: AsyncEngine, spool: Path, engine: ScriptedEngine, body: dict[str, Any], leave: Leave
) -> tuple[Any, Any, list[Any]]:
    """The request with a key allowed one request at a time; then a second request of the
    same key, which gets a 200 only if the first gave its slot back."""
    tenancy = Tenancy.with_database(database, spool)
    app = create_app(Settings(admin_key=ADMIN_KEY, auth="keys"), engine=engine, tenancy=tenancy)
    _, secret = await new_key(tenancy, max_concurrent=1)
    first = await asgi_call(app, URL, body, bearer(secret), leave)
    await asyncio.sleep(0.05)  # an abandoned record is queued, not awaited
    engine.token_delay_s = 0.0
    second = await asgi_call(app, URL, chat(), bearer(secret))
    assert tenancy.writer is not None
    await tenancy.writer.close()
    assert engine.running == set()  # nothing left running in the engine
    return first, second, await usage_rows(database)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_gone_before_its_first_token_pays_for_its_prompt(
    database: AsyncEngine, tmp_path: Path, stream: bool
) -> None:
    engine = ScriptedEngine(token_delay_s=0.5)
    first, second, rows = await run(
        database, tmp_path / "spool", engine, chat(stream=stream), Leave(after_s=0.1)
    )
    assert first.status is None and first.left
    assert second.status == 200
    assert [r.outcome for r in rows] == ["cancelled", "completed"]
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (PROMPT_TOKENS, 0)


@pytest.mark.parametrize("raises", [True, False])
async def test_a_stream_gone_before_its_body_started_settles(
    database: AsyncEngine, tmp_path: Path, raises: bool
) -> None:
    """The first token is out; the client leaves as the response starts. A server that
    raises on that send never iterates the body; one that drops it starts the body and
    cancels it at its first send. Either way the request ends."""
    engine = ScriptedEngine(WORDS, token_delay_s=0.05)
    leave = Leave(at_headers=True, raises=raises)
    first, second, rows = await run(database, tmp_path / "spool", engine, chat(stream=True), leave)
    assert first.chunks == [] and first.left
    assert second.status == 200  # the slot came back
    assert [r.outcome for r in rows] == ["cancelled", "completed"]
    # The engine produced the first token (it opened the stream); nobody read it.
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (PROMPT_TOKENS, 1)


async def test_a_stream_gone_mid_way_pays_for_what_the_engine_produced(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(WORDS, token_delay_s=0.05)
    first, second, rows = await run(
        database, tmp_path / "spool", engine, chat(stream=True), Leave(chunks=3)
    )
    assert first.status == 200 and len(first.chunks) == 3 and first.left
    assert second.status == 200
    assert [r.outcome for r in rows] == ["cancelled", "completed"]
    produced = rows[0].completion_tokens
    assert rows[0].prompt_tokens == PROMPT_TOKENS
    assert 3 <= produced < 8  # what was sent, and at most one more the engine made


async def test_a_400_after_admission_is_a_refusal_and_bills_nothing(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """The engine refuses it (the prompt and max_tokens overflow the context): it never
    took the request, so it leaves no usage row, only a refusal count by its code."""
    engine = ScriptedEngine(max_model_len=14)
    body = chat(messages=[{"role": "user", "content": "one two three four five six"}])
    first, second, rows = await run(database, tmp_path / "spool", engine, body, Leave())
    assert first.status == 400
    assert second.status == 200
    assert [r.outcome for r in rows] == ["completed"]
    refused = await refusal_counts(database)
    assert [(reason, count) for (_, reason), count in refused.items()] == [
        ("context_length_exceeded", 1)
    ]


async def test_a_finished_request_bills_what_its_client_saw(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = ScriptedEngine(WORDS)
    first, _, rows = await run(
        database,
        tmp_path / "spool",
        engine,
        chat(stream=True, stream_options={"include_usage": True}),
        Leave(),
    )
    assert first.status == 200 and not first.left
    assert first.body.endswith(b"data: [DONE]\n\n")
    assert [r.outcome for r in rows] == ["completed", "completed"]
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (PROMPT_TOKENS, 8)
