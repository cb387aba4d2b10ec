"""Reconciliation: seeded random traffic through the app under `--auth keys` (a real
SQLite file, then the real PostgreSQL server), clients leaving at random points (before
anything came, before the first token, as the stream's headers go out, mid-stream,
waiting on a non-streamed answer) and bad requests among them; then the usage rows add
up to what vLLM itself counted, token for token.

vLLM counts a prompt (cached tokens included) when the request's first output reaches
its output processor, and every output token the processor receives while it holds the
request; an aborted request is dropped at once and nothing of it is counted after. Our
bill counts a prompt from the moment the engine took the request. So:

- output tokens: the sum of `completion_tokens` is `vllm:generation_tokens_total`'s delta;
- prompts of requests that produced output: their sum is `vllm:prompt_tokens_total`'s;
- a request abandoned before its first output still pays its whole prompt (vLLM counts
  none of it), and one the engine never took pays nothing.

Runs with n = 1: vLLM counts a prompt once per sequence, the bill once per prompt.
Clients leave through the app's ASGI interface, as granian reports it (tests/asgi_call.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.engine import open_database
from app.main import create_app
from app.tenancy.keys.store import KeyLimits
from app.tenancy.service import Tenancy
from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.vllm_backend.engine import VLLMEngine
from tests.asgi_call import CallResult, Leave, asgi_call
from tests.postgres import TempPostgres
from tests.unit.app.tenancy.helpers import refusal_counts, usage_rows

SEED = 20261201
REQUESTS = 20
AT_ONCE = 4
CHAT = "/v1/chat/completions"
WORDS = [
    "the",
    "of",
    "a",
    "lighthouse",
    "keeper",
    "wrote",
    "ledger",
    "storm",
    "harbour",
    "lamp",
    "oil",
    "night",
    "ship",
]


@dataclass
class Planned:
    tag: str
    path: str
    body: dict[str, Any] | bytes
    leave: Leave
    kind: str  # "good": billed by the engine; "refused": a row of 0; "invalid": no row
    messages: list[dict[str, str]] | None = None


def engine_counts() -> tuple[float, float]:
    def total(name: str) -> float:
        return sum(
            sample.value
            for family in REGISTRY.collect()
            for sample in family.samples
            if sample.name == name
        )

    return total("vllm:prompt_tokens_total"), total("vllm:generation_tokens_total")


def plan(rng: random.Random) -> list[Planned]:
    planned = []
    for i in range(REQUESTS):
        tag = f"rec{i}"
        words = rng.randint(20, 700)
        text = " ".join(rng.choice(WORDS) for _ in range(words))
        messages = [{"role": "user", "content": f"Summarise: {text}"}]
        body: dict[str, Any] = {
            "model": DEFAULT_MODEL_NAME,
            "messages": messages,
            "max_tokens": rng.randint(1, 16),
            "temperature": rng.choice([0.0, 0.8]),
            "seed": i,
            "stream": rng.random() < 0.6,
        }
        roll = rng.random()
        if roll < 0.08:
            planned.append(Planned(tag, CHAT, b'{"model": ', Leave(), "invalid"))
            continue
        if roll < 0.16:
            body["model"] = "no-such-model"
            planned.append(Planned(tag, CHAT, body, Leave(), "refused"))
            continue
        if roll < 0.24:  # refused by the engine, after admission
            body["logit_bias"] = {"9999999": 1}
            planned.append(Planned(tag, CHAT, body, Leave(), "refused"))
            continue
        way = rng.choice(["stay", "early", "first_token", "headers", "mid", "waiting"])
        if way in ("headers", "mid"):
            body["stream"] = True
        if way == "waiting":
            body["stream"] = False
        leave = {
            "stay": Leave(),
            "early": Leave(after_s=rng.uniform(0.0, 0.03)),
            "first_token": Leave(after_s=rng.uniform(0.05, 0.4)),
            "headers": Leave(at_headers=True, raises=rng.random() < 0.5),
            "mid": Leave(chunks=rng.randint(1, 4)),
            "waiting": Leave(after_s=rng.uniform(0.1, 0.8)),
        }[way]
        planned.append(Planned(tag, CHAT, body, leave, "good", messages))
    return planned


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/lilac.db"
    else:
        pg: TempPostgres = request.getfixturevalue("pg_server")  # the session's
        url = await pg.new_database("billing")
    engine = await open_database(url)
    yield engine
    await engine.dispose()


async def settle(real_engine: VLLMEngine) -> None:
    """Until the engine holds nothing, and vLLM has recorded its last step."""
    for _ in range(600):
        if real_engine.unfinished_requests() == 0:
            break
        await asyncio.sleep(0.05)
    assert real_engine.unfinished_requests() == 0
    await asyncio.sleep(0.5)


async def test_usage_rows_add_up_to_the_engine_counts(
    real_engine: VLLMEngine, database: AsyncEngine, tmp_path: Path
) -> None:
    tenancy = Tenancy.with_database(database, tmp_path / "spool")
    app = create_app(Settings(auth="keys"), engine=real_engine, tenancy=tenancy)
    assert tenancy.store is not None and tenancy.writer is not None
    _, secret = await tenancy.store.create("billing", KeyLimits())
    planned = plan(random.Random(SEED))
    await settle(real_engine)
    prompt_before, output_before = engine_counts()

    async def one(p: Planned) -> CallResult:
        headers = {"Authorization": f"Bearer {secret}", "X-Request-Id": p.tag}
        return await asgi_call(app, p.path, p.body, headers, p.leave)

    results: list[CallResult] = []
    for start in range(0, len(planned), AT_ONCE):
        results += await asyncio.gather(*(one(p) for p in planned[start : start + AT_ONCE]))
    await settle(real_engine)
    prompt_after, output_after = engine_counts()
    await tenancy.writer.close()
    rows = await usage_rows(database)
    refusals = await refusal_counts(database)

    tags = {p.tag for p in planned}
    by_tag: dict[str, Any] = {}
    for row in rows:
        tag = row.request_id.split("-")[1] if row.request_id.count("-") >= 2 else row.request_id
        by_tag[tag if tag in tags else row.request_id] = row
    assert len(by_tag) == len(rows)  # one row a request, never two
    # Refused requests (nothing taken by the engine) are counts, not rows; a body that does
    # not decode is neither.
    refused_count = sum(p.kind == "refused" for p in planned)
    assert len(rows) == sum(p.kind not in ("invalid", "refused") for p in planned)
    assert sum(refusals.values()) == refused_count, refusals

    with_output = taken_silent = silent_prompt = 0
    for p, result in zip(planned, results, strict=True):
        if p.kind == "invalid":
            assert result.status == 400 and p.tag not in by_tag
            continue
        if p.kind == "refused":
            assert result.status in (400, 404) and p.tag not in by_tag, result.body
            continue
        if p.tag not in by_tag:  # gone before its response had an id: nothing billed
            assert result.left
            unnamed = [r for key, r in by_tag.items() if key not in tags]
            gone = next(r for r in unnamed if r.outcome == "cancelled")
            assert (gone.prompt_tokens, gone.completion_tokens) == (0, 0)
            del by_tag[gone.request_id]
            continue
        row = by_tag.pop(p.tag)
        assert row.outcome in ("completed", "cancelled"), (p.tag, row.outcome)
        if not result.left:
            assert row.outcome == "completed" and result.status == 200
        assert p.messages is not None
        prompt = len(real_engine.tokenize(messages=p.messages))
        assert row.prompt_tokens in (0, prompt), (p.tag, row.prompt_tokens, prompt)
        if row.completion_tokens > 0:
            assert row.prompt_tokens == prompt
            with_output += row.prompt_tokens
        elif row.prompt_tokens:
            taken_silent += 1  # taken, gone before its first output
            silent_prompt += row.prompt_tokens
    assert not by_tag  # every row belongs to a request that reached the engine
    billed_prompt = sum(r.prompt_tokens for r in rows)
    billed_output = sum(r.completion_tokens for r in rows)
    engine_prompt = prompt_after - prompt_before
    engine_output = output_after - output_before
    print(
        f"\n{database.dialect.name}: {len(rows)} rows "
        f"({sum(r.outcome == 'cancelled' for r in rows)} cancelled, "
        f"{sum(r.outcome == 'rejected' for r in rows)} rejected); "
        f"billed prompt {billed_prompt} = engine {engine_prompt:.0f} + {silent_prompt} of "
        f"{taken_silent} taken before their first output; "
        f"billed output {billed_output} = engine {engine_output:.0f}"
    )
    assert billed_output == engine_output
    assert with_output == engine_prompt
    assert billed_prompt == engine_prompt + silent_prompt
