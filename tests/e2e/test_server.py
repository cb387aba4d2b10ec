"""The running server, driven with the official openai client and with raw HTTP."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_openai_create(sdk: openai.OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model=DEFAULT_MODEL_NAME, messages=FRANCE, temperature=0, max_tokens=20
    )
    assert "Paris" in (completion.choices[0].message.content or "")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_openai_stream(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=DEFAULT_MODEL_NAME,
        messages=FRANCE,
        temperature=0,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_openai_models(sdk: openai.OpenAI) -> None:
    assert [m.id for m in sdk.models.list().data] == [DEFAULT_MODEL_NAME]


def test_openai_unknown_model_raises_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.chat.completions.create(model="nope", messages=FRANCE)
    assert caught.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b"this is not json", 400, None),
        (b'{"model": "%s"}' % DEFAULT_MODEL_NAME.encode(), 400, "messages"),
        (b'{"model": "%s", "messages": []}' % DEFAULT_MODEL_NAME.encode(), 400, "messages"),
        (
            b'{"model": "%s", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}'
            % DEFAULT_MODEL_NAME.encode(),
            400,
            "max_tokens",
        ),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "model"),
    ],
)
def test_raw_bad_inputs(server: Server, raw: bytes, status: int, param: str | None) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_raw_unknown_route(server: Server) -> None:
    response = httpx.post(f"{server.base_url}/v1/nothing", json={})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_disconnect_mid_stream_aborts_engine_request(server: Server) -> None:
    request = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
    }
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{server.base_url}/v1/chat/completions", json=request) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in received)
        assert server.unfinished_requests() == 1
    # The connection is closed; the engine must drop the request promptly.
    deadline = time.monotonic() + 15
    while server.unfinished_requests() != 0:
        assert time.monotonic() < deadline, "engine request still running after disconnect"
        time.sleep(0.2)
    follow_up = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": DEFAULT_MODEL_NAME, "messages": FRANCE, "max_tokens": 5},
        timeout=60,
    )
    assert follow_up.status_code == 200
