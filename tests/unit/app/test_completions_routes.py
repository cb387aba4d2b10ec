"""/v1/completions and /tokenize over a scripted engine: shapes and fan-out."""

import httpx

from tests.client import provided, stream_events

URL = "/v1/completions"


async def test_completion_shape_and_default_length(client: httpx.AsyncClient) -> None:
    body = (await client.post(URL, json={"model": "scripted", "prompt": "a b"})).json()
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    assert body["choices"] == [
        {"index": 0, "text": "Hello, world!", "logprobs": None, "finish_reason": "stop"}
    ]
    assert body["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 4,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


async def test_prompt_list_times_n_orders_choices(client: httpx.AsyncClient) -> None:
    request = {"model": "scripted", "prompt": ["a", "b c"], "n": 2, "max_tokens": 1}
    body = (await client.post(URL, json=request)).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == 3
    assert body["usage"]["completion_tokens"] == 4


async def test_echo_and_logprobs(client: httpx.AsyncClient) -> None:
    request = {"model": "scripted", "prompt": "x y", "echo": True, "logprobs": 2, "max_tokens": 2}
    choice = (await client.post(URL, json=request)).json()["choices"][0]
    assert choice["text"] == "x yHello,"
    logprobs = choice["logprobs"]
    # The first prompt token has no logprob (nothing predicted it) but keeps its text.
    assert logprobs["tokens"] == ["x", " y", "Hello", ","]
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["token_logprobs"][0] is None
    assert logprobs["top_logprobs"][2] == {"Hello": -0.5, "alt1": -2.0}
    assert logprobs["text_offset"] == [0, 1, 3, 8]


async def test_stream_echoes_once(client: httpx.AsyncClient) -> None:
    request = {"model": "scripted", "prompt": "p", "echo": True, "stream": True}
    response = await client.post(URL, json=request)
    texts = [e["choices"][0]["text"] for e in stream_events(response)]  # ends in [DONE]
    assert "".join(texts) == "pHello, world!"


async def test_tokenize_and_detokenize(client: httpx.AsyncClient) -> None:
    tokenized = (await client.post("/tokenize", json={"prompt": "ab cde"})).json()
    assert tokenized == {"count": 2, "max_model_len": 2048, "tokens": [2, 3]}
    back = (await client.post("/detokenize", json={"tokens": [2, 3]})).json()
    assert back == {"prompt": "xx xxx"}


async def test_completions_and_chat_share_the_fairness_key(client: httpx.AsyncClient) -> None:
    from engine.scripted import ScriptedEngine

    engine: ScriptedEngine = provided(client._transport.app, "models").first.engine  # type: ignore[attr-defined]
    headers = {"Authorization": "Bearer sk-one"}
    await client.post(URL, json={"model": "scripted", "prompt": "a"}, headers=headers)
    chat = {"model": "scripted", "messages": [{"role": "user", "content": "a"}]}
    await client.post("/v1/chat/completions", json=chat, headers=headers)
    keys = [request.client for request in engine.requests]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert keys[0] is not None and "sk-one" not in keys[0]  # hashed, never the key itself
