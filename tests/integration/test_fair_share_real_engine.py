"""The fair scheduler in the real engine (on by default): a light client's request,
sent while a heavy client's long prompts fill the engine, gets its first token before
most of them; and each request tells the engine whose it is and its client's weight."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from contextlib import aclosing
from typing import Any

import pytest

from engine.fairness import tenant_args
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import VLLMEngine

HEAVY_PROMPTS = 8
HEAVY_PROMPT_TOKENS = 1500


def fresh_tokens(count: int) -> list[int]:
    """A prompt of `count` token ids no other request sends (no prefix-cache hit)."""
    rng = random.Random(uuid.uuid4().int)
    return [rng.randrange(1_000, 40_000) for _ in range(count)]


def request(rid: str, client: str, tokens: list[int], weight: float = 1.0) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid,
        sampling=SamplingOptions(max_tokens=2, ignore_eos=True, temperature=0.0),
        prompt_token_ids=tokens,
        client=client,
        weight=weight,
    )


async def test_a_light_clients_first_token_comes_before_most_of_a_heavy_burst(
    real_engine: VLLMEngine,
) -> None:
    firsts: list[str] = []  # request ids in the order of their first outputs
    tag = uuid.uuid4().hex[:8]

    async def run(generate: GenerateRequest) -> int:
        tokens = 0
        async with aclosing(real_engine.generate(generate)) as outputs:
            async for output in outputs:
                if generate.request_id not in firsts:
                    firsts.append(generate.request_id)
                tokens += sum(choice.token_count for choice in output.choices)
        return tokens

    heavy_ids = [f"fair-heavy-{tag}-{i}" for i in range(HEAVY_PROMPTS)]
    heavy = [
        asyncio.create_task(run(request(rid, "key:heavy", fresh_tokens(HEAVY_PROMPT_TOKENS))))
        for rid in heavy_ids
    ]
    # The light client comes once the heavy one has been served: its prompts fill steps.
    deadline = time.monotonic() + 120
    while not firsts:
        assert time.monotonic() < deadline, "no heavy request got a first token"
        await asyncio.sleep(0.01)
    light_id = f"fair-light-{tag}"
    light = asyncio.create_task(run(request(light_id, "key:light", fresh_tokens(12))))

    counts = await asyncio.wait_for(asyncio.gather(*heavy, light), timeout=300)
    assert counts == [2] * (HEAVY_PROMPTS + 1)  # all finish, every token there
    assert sorted(firsts) == sorted([*heavy_ids, light_id])
    heavy_before = firsts.index(light_id)
    # First come first served would run all eight 1,500-token prompts first.
    assert heavy_before <= HEAVY_PROMPTS - 5, firsts


async def test_a_requests_client_and_weight_reach_the_engine(
    real_engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the engine core's scheduler reads (its sampling parameters' `extra_args`).
    The package's engine publishes no shares file (its config sets no
    `fairness_shares_path`): the parameters are looked at where they leave for the core."""
    llm: Any = real_engine._llm
    submitted: list[Any] = []
    add_request = llm.add_request

    async def spy(request_id: str, prompt: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        submitted.append(params)
        return await add_request(request_id, prompt, params, *args, **kwargs)

    monkeypatch.setattr(llm, "add_request", spy)
    generate = request(f"fair-weight-{uuid.uuid4().hex[:8]}", "key:weighted", [1_000] * 8, 3.0)
    async with aclosing(real_engine.generate(generate)) as outputs:
        counts = [sum(c.token_count for c in output.choices) async for output in outputs]
    assert sum(counts) == 2
    assert [params.extra_args for params in submitted] == [tenant_args("key:weighted", 3.0)]
