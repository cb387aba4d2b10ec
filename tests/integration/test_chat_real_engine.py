"""Chat completions through the app and the real vLLM engine on SmolLM2-135M-Instruct."""

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import VLLMEngine
from tests.client import stream_events

URL = "/v1/chat/completions"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a long story about a dragon."}]


def body(**fields: object) -> dict:
    return {"model": DEFAULT_MODEL_NAME, "messages": FRANCE, **fields}


async def test_capital_of_france(real_client: httpx.AsyncClient) -> None:
    response = await real_client.post(URL, json=body(temperature=0, max_tokens=20))
    assert response.status_code == 200
    assert "Paris" in response.json()["choices"][0]["message"]["content"]


async def test_stream_equals_non_stream(real_client: httpx.AsyncClient) -> None:
    request = body(temperature=0, seed=7, max_tokens=24, messages=STORY)
    plain = (await real_client.post(URL, json=request)).json()
    streamed = await real_client.post(URL, json={**request, "stream": True})
    chunks = stream_events(streamed)  # ends in data: [DONE]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]


async def test_max_tokens_gives_length_and_exact_count(real_client: httpx.AsyncClient) -> None:
    response = await real_client.post(URL, json=body(messages=STORY, max_tokens=7, temperature=0))
    data = response.json()
    assert data["choices"][0]["finish_reason"] == "length"
    usage = data["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7


async def test_usage_adds_up_in_stream(real_client: httpx.AsyncClient) -> None:
    request = body(max_tokens=6, stream=True, stream_options={"include_usage": True})
    response = await real_client.post(URL, json=request)
    usage = stream_events(response)[-1]["usage"]
    assert usage["prompt_tokens"] > 10
    assert 1 <= usage["completion_tokens"] <= 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_stop_string_ends_with_stop(real_client: httpx.AsyncClient) -> None:
    response = await real_client.post(URL, json=body(temperature=0, max_tokens=20, stop=["Paris"]))
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "Paris" not in choice["message"]["content"]


async def test_context_overflow_is_400(real_client: httpx.AsyncClient) -> None:
    response = await real_client.post(URL, json=body(max_tokens=5000))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_closing_the_stream_aborts_the_engine_request(real_engine: VLLMEngine) -> None:
    request = GenerateRequest(
        request_id="abort-me",
        sampling=SamplingOptions(max_tokens=500, ignore_eos=True),
        messages=STORY,
    )
    outputs = real_engine.generate(request)
    await anext(outputs)
    assert real_engine.unfinished_requests() == 1
    await outputs.aclose()
    assert real_engine.unfinished_requests() == 0
