"""The HTTP layer over a scripted engine: shapes, streaming framing and the error contract."""

import httpx

from engine.scripted import ScriptedEngine
from tests.client import app_client, stream_events

URL = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]


async def test_completion_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": USER})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "scripted"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello, world!", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    usage = body["usage"]
    assert usage["completion_tokens"] == 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_max_tokens_cuts_with_length(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": USER, "max_tokens": 2})
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Hello,"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


async def test_stream_framing(client: httpx.AsyncClient) -> None:
    request = {
        "model": "scripted",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = await client.post(URL, json=request)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks = stream_events(response)  # ends in data: [DONE]
    content_chunks, usage_chunk = chunks[:-1], chunks[-1]
    assert content_chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}
    assert all("role" not in c["choices"][0]["delta"] for c in content_chunks[1:])
    assert [c["choices"][0]["finish_reason"] for c in content_chunks] == [None, None, None, "stop"]
    assert "".join(c["choices"][0]["delta"]["content"] for c in content_chunks) == "Hello, world!"
    assert all(c["usage"] is None for c in content_chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 4
    assert len({c["id"] for c in chunks}) == 1


async def test_stream_without_usage_has_no_usage_key(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": USER, "stream": True})
    chunks = stream_events(response)
    assert all("usage" not in c for c in chunks)


async def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


async def test_body_not_json(client: httpx.AsyncClient) -> None:
    response = await client.post(
        URL, content=b"{oops", headers={"content-type": "application/json"}
    )
    error = await assert_error(response, 400)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_json"


async def test_missing_messages(client: httpx.AsyncClient) -> None:
    await assert_error(await client.post(URL, json={"model": "scripted"}), 400, "messages")


async def test_empty_messages(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": []})
    await assert_error(response, 400, "messages")


async def test_wrong_type(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": USER, "stream": "yes"})
    await assert_error(response, 400, "stream")


async def test_wrong_type_nested(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": 5}]}]
    response = await client.post(URL, json={"model": "scripted", "messages": messages})
    await assert_error(response, 400, "messages[0].content[0].text")


async def test_unknown_model(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "gpt-9", "messages": USER})
    error = await assert_error(response, 404, "model")
    assert error["code"] == "model_not_found"


async def test_unknown_route(client: httpx.AsyncClient) -> None:
    error = await assert_error(await client.get("/v1/nothing-here"), 404)
    assert error["code"] == "not_found"


async def test_wrong_method(client: httpx.AsyncClient) -> None:
    await assert_error(await client.get(URL), 405)


async def test_stream_options_without_stream(client: httpx.AsyncClient) -> None:
    body = {"model": "scripted", "messages": USER, "stream_options": {"include_usage": True}}
    await assert_error(await client.post(URL, json=body), 400, "stream_options")


async def test_context_overflow_is_400_before_the_stream(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    body = {"model": "scripted", "messages": USER, "max_tokens": 5000, "stream": True}
    response = await client.post(URL, json=body)
    error = await assert_error(response, 400, "max_tokens")
    assert error["code"] == "context_length_exceeded"
    assert scripted_engine.unfinished_requests() == 0


async def test_engine_not_ready_is_503(scripted_engine: ScriptedEngine) -> None:
    scripted_engine._ready = False
    async with app_client(scripted_engine) as c:
        response = await c.post(URL, json={"model": "scripted", "messages": USER})
        assert response.status_code == 503
        assert response.headers["retry-after"]
        assert (await c.get("/health")).status_code == 503


async def test_models_and_health(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "scripted"
    assert models["data"][0]["max_model_len"] == 2048
    assert (await client.get("/health")).json() == {"status": "ok"}


async def test_metrics_report_unfinished_requests(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics")).text
    assert "lilac_engine_unfinished_requests 0.0" in text
    assert "lilac_engine_ready 1.0" in text
