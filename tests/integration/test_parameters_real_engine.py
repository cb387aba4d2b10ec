"""Each sampling parameter shows its effect through the real engine on SmolLM2."""

from __future__ import annotations

import httpx
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.client import stream_events

URL = "/v1/chat/completions"
MODEL = DEFAULT_MODEL_NAME
POEM = [{"role": "user", "content": "Write a poem about the sea and the sky."}]
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


async def chat(client: httpx.AsyncClient, **fields: object) -> dict:
    body = {"model": MODEL, "messages": POEM, "max_tokens": 16, **fields}
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def text_of(completion: dict, index: int = 0) -> str:
    return completion["choices"][index]["message"]["content"]


async def token_id(client: httpx.AsyncClient, text: str) -> int:
    response = await client.post(
        "/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}
    )
    tokens = response.json()["tokens"]
    assert len(tokens) == 1, tokens
    return tokens[0]


async def test_logit_bias_forces_a_token(real_client: httpx.AsyncClient) -> None:
    cat = await token_id(real_client, " cat")
    result = await chat(real_client, logit_bias={str(cat): 100}, max_tokens=5, temperature=0)
    assert text_of(result).strip() == "cat cat cat cat cat"


async def test_negative_logit_bias_bans_a_token(real_client: httpx.AsyncClient) -> None:
    paris = await token_id(real_client, " Paris")
    plain = await chat(real_client, messages=FRANCE, temperature=0)
    banned = await chat(real_client, messages=FRANCE, temperature=0, logit_bias={str(paris): -100})
    assert "Paris" in text_of(plain)
    assert " Paris" not in text_of(banned)


async def test_seed_makes_sampling_repeatable(real_client: httpx.AsyncClient) -> None:
    first = await chat(real_client, temperature=1.0, seed=1234)
    again = await chat(real_client, temperature=1.0, seed=1234)
    other = await chat(real_client, temperature=1.0, seed=99)
    assert text_of(first) == text_of(again)
    assert text_of(first) != text_of(other)


@pytest.mark.parametrize(
    "narrowing", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}], ids=["top_k", "top_p", "min_p"]
)
async def test_narrow_sampling_equals_greedy(
    real_client: httpx.AsyncClient, narrowing: dict
) -> None:
    greedy = await chat(real_client, temperature=0)
    narrowed = await chat(real_client, temperature=1.5, seed=5, **narrowing)
    assert text_of(narrowed) == text_of(greedy)


async def test_top_logprobs_are_sorted_alternatives(real_client: httpx.AsyncClient) -> None:
    result = await chat(real_client, logprobs=True, top_logprobs=3, max_tokens=4, temperature=0)
    content = result["choices"][0]["logprobs"]["content"]
    assert len(content) == result["usage"]["completion_tokens"] == 4
    for entry in content:
        tops = entry["top_logprobs"]
        assert len(tops) == 3
        values = [t["logprob"] for t in tops]
        assert values == sorted(values, reverse=True)
        assert entry["token"] == tops[0]["token"]  # greedy picks the best
        assert entry["bytes"] == list(entry["token"].encode())
        assert entry["logprob"] <= 0
    assert "".join(e["token"] for e in content) == text_of(result)


async def test_logprobs_stream(real_client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "messages": POEM, "max_tokens": 3, "stream": True, "logprobs": True}
    response = await real_client.post(URL, json={**body, "top_logprobs": 2})
    chunks = stream_events(response)
    entries = [c["choices"][0]["logprobs"]["content"] for c in chunks if c["choices"]]
    flat = [e for group in entries if group for e in group]
    assert len(flat) == 3
    assert all(len(e["top_logprobs"]) == 2 for e in flat)


async def test_n_gives_n_choices(real_client: httpx.AsyncClient) -> None:
    result = await chat(real_client, n=2, temperature=1.0, seed=3, max_tokens=6)
    assert [c["index"] for c in result["choices"]] == [0, 1]
    total = result["usage"]["completion_tokens"]
    assert total >= 2 and total <= 12


async def test_n_at_temperature_zero_is_allowed(real_client: httpx.AsyncClient) -> None:
    result = await chat(real_client, n=3, temperature=0, max_tokens=5)
    texts = {text_of(result, i) for i in range(3)}
    assert len(result["choices"]) == 3 and len(texts) == 1
    assert result["usage"]["completion_tokens"] == 15


async def test_n_streams_interleaved_with_own_role_and_finish(
    real_client: httpx.AsyncClient,
) -> None:
    body = {"model": MODEL, "messages": POEM, "max_tokens": 4, "stream": True, "n": 2}
    response = await real_client.post(URL, json={**body, "temperature": 0})
    chunks = stream_events(response)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant"
        assert mine[-1]["finish_reason"] == "length"


async def repeated_tokens(client: httpx.AsyncClient, **penalty: float) -> int:
    result = await chat(
        client,
        messages=[{"role": "user", "content": "Say the word 'go' fifty times."}],
        temperature=0,
        max_tokens=30,
        logprobs=True,
        **penalty,
    )
    tokens = [e["token"] for e in result["choices"][0]["logprobs"]["content"]]
    return len(tokens) - len(set(tokens))


@pytest.mark.parametrize(
    "penalty",
    [{"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"repetition_penalty": 2.0}],
    ids=["presence", "frequency", "repetition"],
)
async def test_penalties_reduce_repetition(real_client: httpx.AsyncClient, penalty: dict) -> None:
    baseline = await repeated_tokens(real_client)
    penalised = await repeated_tokens(real_client, **penalty)
    assert penalised < baseline


async def test_max_completion_tokens_wins(real_client: httpx.AsyncClient) -> None:
    result = await chat(real_client, max_tokens=12, max_completion_tokens=3, temperature=0)
    assert result["usage"]["completion_tokens"] == 3
    assert result["choices"][0]["finish_reason"] == "length"


async def test_min_tokens_and_ignore_eos(real_client: httpx.AsyncClient) -> None:
    short = [{"role": "user", "content": "Say yes."}]
    result = await chat(real_client, messages=short, temperature=0, max_tokens=12, ignore_eos=True)
    assert result["usage"]["completion_tokens"] == 12
    result = await chat(real_client, messages=short, temperature=0, max_tokens=40, min_tokens=9)
    assert result["usage"]["completion_tokens"] >= 9


async def test_include_stop_str_in_output(real_client: httpx.AsyncClient) -> None:
    fields = {"messages": FRANCE, "temperature": 0, "max_tokens": 20, "stop": ["Paris"]}
    without = await chat(real_client, **fields)
    included = await chat(real_client, include_stop_str_in_output=True, **fields)
    assert text_of(included) == text_of(without) + "Paris"


async def test_stop_token_ids(real_client: httpx.AsyncClient) -> None:
    france = await token_id(real_client, " France")
    result = await chat(
        real_client, messages=FRANCE, temperature=0, max_tokens=20, stop_token_ids=[france]
    )
    assert result["choices"][0]["finish_reason"] == "stop"
    assert "France" not in text_of(result)


async def test_skip_special_tokens(real_client: httpx.AsyncClient) -> None:
    fields = {"temperature": 0, "max_tokens": 2, "ignore_eos": True, "logit_bias": {"2": 100}}
    skipped = await chat(real_client, **fields)
    kept = await chat(real_client, skip_special_tokens=False, **fields)
    assert "<|im_end|>" not in text_of(skipped)
    assert "<|im_end|>" in text_of(kept)


async def test_tokenize_detokenize_roundtrip(real_client: httpx.AsyncClient) -> None:
    tokenized = (
        await real_client.post("/tokenize", json={"model": MODEL, "prompt": "Hello world"})
    ).json()
    assert tokenized["count"] == len(tokenized["tokens"]) == 2
    assert tokenized["max_model_len"] == 2048
    back = await real_client.post(
        "/detokenize", json={"model": MODEL, "tokens": tokenized["tokens"]}
    )
    assert back.json() == {"prompt": "Hello world"}
    chat_count = (
        await real_client.post("/tokenize", json={"model": MODEL, "messages": FRANCE})
    ).json()
    completion = await chat(real_client, messages=FRANCE, max_tokens=1)
    assert chat_count["count"] == completion["usage"]["prompt_tokens"]


async def test_bad_token_ids_are_400(real_client: httpx.AsyncClient) -> None:
    response = await real_client.post(
        URL, json={"model": MODEL, "messages": POEM, "logit_bias": {"999999": 5}}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "logit_bias"
    response = await real_client.post("/detokenize", json={"model": MODEL, "tokens": [10**7]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tokens"
