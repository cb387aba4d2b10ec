"""Legacy /v1/completions through the real engine."""

from __future__ import annotations

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.client import stream_events

URL = "/v1/completions"
PROMPT = "The capital of France is"


async def complete(client: httpx.AsyncClient, **fields: object) -> dict:
    response = await client.post(
        URL, json={"model": DEFAULT_MODEL_NAME, "prompt": PROMPT, **fields}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_default_max_tokens_is_16(real_client: httpx.AsyncClient) -> None:
    result = await complete(real_client, ignore_eos=True, temperature=0)
    assert result["object"] == "text_completion"
    assert result["usage"]["completion_tokens"] == 16
    assert result["choices"][0]["finish_reason"] == "length"


async def test_greedy_answer_and_echo(real_client: httpx.AsyncClient) -> None:
    plain = await complete(real_client, temperature=0, max_tokens=4)
    echoed = await complete(real_client, temperature=0, max_tokens=4, echo=True)
    assert "Paris" in plain["choices"][0]["text"]
    assert echoed["choices"][0]["text"] == PROMPT + plain["choices"][0]["text"]


async def test_logprobs_integer(real_client: httpx.AsyncClient) -> None:
    result = await complete(real_client, temperature=0, max_tokens=3, logprobs=2)
    logprobs = result["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 3
    assert all(len(top) == 2 for top in logprobs["top_logprobs"])
    assert "".join(logprobs["tokens"]) == result["choices"][0]["text"]
    assert logprobs["text_offset"][0] == 0


async def test_echo_with_logprobs_scores_the_prompt(real_client: httpx.AsyncClient) -> None:
    result = await complete(real_client, temperature=0, max_tokens=1, logprobs=1, echo=True)
    logprobs = result["choices"][0]["logprobs"]
    prompt_tokens = result["usage"]["prompt_tokens"]
    assert len(logprobs["tokens"]) == prompt_tokens + 1
    assert logprobs["token_logprobs"][0] is None
    assert all(lp is not None for lp in logprobs["token_logprobs"][1:])


async def test_prompt_list_and_n(real_client: httpx.AsyncClient) -> None:
    result = await complete(
        real_client, prompt=["One, two,", "Red, green,"], n=2, max_tokens=3, temperature=0
    )
    assert [c["index"] for c in result["choices"]] == [0, 1, 2, 3]
    assert result["choices"][0]["text"] == result["choices"][1]["text"]
    assert result["usage"]["completion_tokens"] == 12


async def test_stream(real_client: httpx.AsyncClient) -> None:
    body = {"model": DEFAULT_MODEL_NAME, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    plain = (await real_client.post(URL, json=body)).json()
    response = await real_client.post(
        URL, json={**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    chunks = stream_events(response)  # ends in data: [DONE]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == plain["choices"][0]["text"]
    assert chunks[-1]["usage"]["completion_tokens"] == 4
