"""Seeded sampling on the CPU engine with chunked prefill: a prompt longer than one
prefill step's default budget and a burst of seeded requests that overflows one step
both complete, the engine stays up (vLLM's own rewind of a split prompt's generator
would kill it on the CPU), and a seed samples the same text split or not."""

from __future__ import annotations

import asyncio

from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.vllm_backend.engine import VLLMEngine
from tests.client import AppClient

# Common words: about one token each, so ~1,800 tokens: longer than vLLM's CPU default
# step (2,048 tokens) once short requests share the step, within the 2,048 context.
LONG_PROMPT = " ".join(["the cat sat on the mat and looked at the dog"] * 160)


def chat(content: str, seed: int) -> dict[str, object]:
    return {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": content}],
        "seed": seed,
        "temperature": 1.0,
        "max_tokens": 4,
    }


async def test_a_seeded_long_prompt_beside_short_ones_completes(
    real_client: AppClient, real_engine: VLLMEngine
) -> None:
    short = [chat(f"Say hello number {i} " * 20, seed=i) for i in range(4)]
    responses = await asyncio.gather(
        *(real_client.post("/v1/chat/completions", json=b) for b in [chat(LONG_PROMPT, 7), *short])
    )
    assert [r.status_code for r in responses] == [200] * 5, responses[0].text
    assert responses[0].json()["usage"]["prompt_tokens"] > 1500
    assert real_engine.is_ready() and real_engine.failure() is None
    assert real_engine.unfinished_requests() == 0


async def test_a_seeded_burst_of_64_completes(
    real_client: AppClient, real_engine: VLLMEngine
) -> None:
    bodies = [chat(f"Tell me a story about the number {i}. " * 8, seed=i) for i in range(64)]
    responses = await asyncio.gather(
        *(real_client.post("/v1/chat/completions", json=b) for b in bodies)
    )
    assert [r.status_code for r in responses] == [200] * 64
    assert all(r.json()["choices"][0]["finish_reason"] for r in responses)
    assert real_engine.is_ready() and real_engine.failure() is None
    # The same seed samples the same tokens again: seeds still work.
    first, again = [
        (await real_client.post("/v1/chat/completions", json=bodies[0])).json() for _ in range(2)
    ]
    assert first["choices"][0]["message"] == again["choices"][0]["message"]
    assert real_engine.unfinished_requests() == 0


async def test_a_seed_samples_the_same_text_whether_its_prompt_was_split(
    real_client: AppClient, real_engine: VLLMEngine
) -> None:
    # 24 prompts of ~120 tokens overflow a 2,048-token step, so the step splits one or
    # two of them; alone, none is split. A draw discarded at a split that moved the
    # random stream would change that request's text (temperature 1, 4 tokens).
    bodies = [
        chat(f"Write a poem about the colour number {i}. " * 12, seed=100 + i) for i in range(24)
    ]
    together = await asyncio.gather(
        *(real_client.post("/v1/chat/completions", json=b) for b in bodies)
    )
    alone = [await real_client.post("/v1/chat/completions", json=b) for b in bodies]
    texts = [[r.json()["choices"][0]["message"]["content"] for r in rs] for rs in (together, alone)]
    assert texts[0] == texts[1]
    assert real_engine.is_ready() and real_engine.failure() is None
