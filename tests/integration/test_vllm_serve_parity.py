"""lilac-serve against `vllm serve` on the same engine and model: the answers recorded
from `vllm serve` (tests/integration/record_vllm_serve.py says how) replayed through our
app over the real engine. Echoed prompts must score the same way: the same tokens, the
same text offsets, the same logprobs; constrained answers must be the same text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME

FIXTURE = Path(__file__).parent / "data" / "vllm_serve_answers.json"
RECORDED = json.loads(FIXTURE.read_text())


def _close(ours: list, theirs: list) -> bool:
    return len(ours) == len(theirs) and all(
        (a is None and b is None)
        or (a is not None and b is not None and math.isclose(a, b, abs_tol=2e-3))
        for a, b in zip(ours, theirs, strict=True)
    )


@pytest.mark.parametrize("case", RECORDED, ids=[f"{i}-{c['path']}" for i, c in enumerate(RECORDED)])
async def test_same_answer_as_vllm_serve(real_client: httpx.AsyncClient, case: dict) -> None:
    # Recorded under the served name `vllm serve` was given; ours is the default's.
    body = {**case["body"], "model": DEFAULT_MODEL_NAME}
    response = await real_client.post(case["path"], json=body)
    assert response.status_code == 200, response.text
    ours, theirs = response.json(), case["answer"]
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert len(ours["choices"]) == len(theirs["choices"])
    for mine, recorded in zip(ours["choices"], theirs["choices"], strict=True):
        if "message" in recorded:
            assert mine["message"]["content"] == recorded["message"]["content"]
            continue
        assert mine["text"] == recorded["text"]
        if recorded.get("logprobs") is None:
            continue
        got, want = mine["logprobs"], recorded["logprobs"]
        assert got["tokens"] == want["tokens"]
        assert got["text_offset"] == want["text_offset"]
        assert _close(got["token_logprobs"], want["token_logprobs"])


SCORED = [case for case in RECORDED if case["answer"]["choices"][0].get("prompt_logprobs")]


@pytest.mark.parametrize("case", SCORED, ids=[str(RECORDED.index(c)) for c in SCORED])
async def test_same_prompt_logprobs_as_vllm_serve(
    real_client: httpx.AsyncClient, case: dict
) -> None:
    """`vllm serve` fills `prompt_logprobs` on echoed prompts with `logprobs` k (it asks
    the engine for k prompt logprobs); asking for the same k here gives the same maps."""
    body = {**case["body"], "model": DEFAULT_MODEL_NAME}
    body["prompt_logprobs"] = body["logprobs"]
    response = await real_client.post(case["path"], json=body)
    assert response.status_code == 200, response.text
    for mine, recorded in zip(response.json()["choices"], case["answer"]["choices"], strict=True):
        ours, theirs = mine["prompt_logprobs"], recorded["prompt_logprobs"]
        assert len(ours) == len(theirs)
        assert ours[0] is None and theirs[0] is None
        for got, want in zip(ours[1:], theirs[1:], strict=True):
            assert set(got) == set(want)
            for token_id, entry in want.items():
                assert got[token_id]["rank"] == entry["rank"]
                assert got[token_id]["decoded_token"] == entry["decoded_token"]
                assert math.isclose(got[token_id]["logprob"], entry["logprob"], abs_tol=2e-3)
