"""POST /v1/messages and /v1/messages/count_tokens over scripted engines: Anthropic's
shapes, the request's mapping onto the engine request, the clamp of `max_tokens`,
errors in Anthropic's shape; GET /v1/models/{id}."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import pytest
from PIL import Image

from app.config.settings import Settings
from engine.errors import EngineError
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, ToolCallDelta
from engine.scripted import ScriptedEngine
from tests.anthropic_sse import anthropic_sdk, read_events
from tests.client import app_client

URL = "/v1/messages"
USER = [{"role": "user", "content": "hi"}]
HEADERS = {"anthropic-version": "2023-06-01"}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "max_tokens": 16, "messages": USER, **extra}


class StepEngine(ScriptedEngine):
    """Plays `steps` (ChoiceDelta) as one choice; remembers the requests it got."""

    def __init__(self, steps: list[ChoiceDelta], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps = steps

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.requests.append(request)
        for step in self.steps:
            yield GenerateOutput(prompt_tokens=5, choices=[step], cached_tokens=2)


THINK_THEN_ANSWER = [
    ChoiceDelta(0, "", 1, reasoning="Let me ", reasoning_token_count=1),
    ChoiceDelta(0, "", 1, reasoning="think.", reasoning_token_count=1),
    ChoiceDelta(0, "Hello", 1),
    ChoiceDelta(0, "!", 1, "stop"),
]
TOOL_CALL = [
    ChoiceDelta(0, "Checking.", 1),
    ChoiceDelta(0, "", 1, tool_calls=[ToolCallDelta(0, "call_1", "get_weather", "")]),
    ChoiceDelta(0, "", 1, tool_calls=[ToolCallDelta(0, None, None, '{"city": ')]),
    ChoiceDelta(0, "", 1, "tool_calls", tool_calls=[ToolCallDelta(0, None, None, '"Paris"}')]),
]
# As vLLM emits with include_stop_str_in_output: the stop string ends the text.
STOPPED = [ChoiceDelta(0, "one two", 1), ChoiceDelta(0, " EN", 1), ChoiceDelta(0, "D", 1, "stop")]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


async def post(engine: ScriptedEngine, payload: dict[str, Any], **kw: Any) -> httpx.Response:
    async with app_client(engine) as http:
        return await http.post(URL, json=payload, headers={**HEADERS, **kw})


async def test_message_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(URL + "?beta=true", json=body(), headers=HEADERS)
    assert response.status_code == 200, response.text
    message = response.json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg") and message["model"] == "scripted"
    assert message["content"] == [{"type": "text", "text": "Hello, world!"}]
    assert message["stop_reason"] == "end_turn" and message["stop_sequence"] is None
    assert message["usage"]["output_tokens"] == 4 and message["usage"]["input_tokens"] > 0
    assert "x-max-tokens-clamped" not in response.headers


async def test_max_tokens_stop_reason(client: httpx.AsyncClient) -> None:
    message = (await client.post(URL, json=body(max_tokens=2))).json()
    assert message["content"] == [{"type": "text", "text": "Hello,"}]
    assert message["stop_reason"] == "max_tokens"


async def test_thinking_blocks_and_cached_usage() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    message = (await post(engine, body(thinking=thinking, max_tokens=1025))).json()
    assert message["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": ""},
        {"type": "text", "text": "Hello!"},
    ]
    assert message["usage"] == {
        "input_tokens": 3,
        "output_tokens": 4,
        "cache_read_input_tokens": 2,
        "cache_creation_input_tokens": 0,
    }
    assert engine.requests[0].reasoning_controls == {"thinking": True}


@pytest.mark.parametrize(
    ("extra", "controls"),
    [
        ({"thinking": {"type": "disabled"}}, {"thinking": False}),
        ({"thinking": {"type": "adaptive"}}, {}),
        ({"output_config": {"effort": "low"}}, {"reasoning_effort": "low"}),
        (
            {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
            {"reasoning_effort": "high"},
        ),
    ],
)
async def test_reasoning_controls(extra: dict[str, Any], controls: dict[str, Any]) -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    assert (await post(engine, body(**extra))).status_code == 200
    assert engine.requests[0].reasoning_controls == controls


async def test_stream_events_of_thinking_and_text() -> None:
    response = await post(StepEngine(THINK_THEN_ANSWER), body(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = read_events(response)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 3
    assert events[2]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[3]["delta"] == {"type": "thinking_delta", "thinking": "Let me "}
    assert events[6] == {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "text", "text": ""},
    }
    assert [e["delta"]["text"] for e in events[7:9]] == ["Hello", "!"]
    assert events[10]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    # The final usage has every field of the message's usage, as Anthropic's does.
    assert events[10]["usage"] == {
        "output_tokens": 4,
        "input_tokens": 3,
        "cache_read_input_tokens": 2,
        "cache_creation_input_tokens": 0,
    }


async def test_tool_use_whole_and_streamed() -> None:
    request = body(tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "get_weather"})
    engine = StepEngine(TOOL_CALL)
    message = (await post(engine, request)).json()
    assert message["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert message["stop_reason"] == "tool_use"
    generate = engine.requests[0]
    assert generate.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert (
        generate.tools is not None
        and generate.tools[0]["function"]["parameters"] == (WEATHER_TOOL["input_schema"])
    )
    events = read_events(await post(StepEngine(TOOL_CALL), {**request, "stream": True}))
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}},
    ]
    partial = [
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["index"] == 1
    ]
    assert "".join(partial) == '{"city": "Paris"}'
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("choice", "openai_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", True),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
        ({"type": "none"}, None, True),
    ],
)
async def test_tool_choice_mapping(
    choice: dict[str, Any], openai_choice: str | None, parallel: bool
) -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    assert (await post(engine, body(tools=[WEATHER_TOOL], tool_choice=choice))).status_code == 200
    generate = engine.requests[0]
    if openai_choice is None:  # `none`: the tools are not offered to the model
        assert generate.tools is None
    else:
        assert generate.tool_choice == openai_choice and generate.tools is not None
    assert generate.parallel_tool_calls is parallel


async def test_stop_sequence_whole_and_streamed() -> None:
    request = body(stop_sequences=["END", "STOP"])
    engine = StepEngine(STOPPED)
    message = (await post(engine, request)).json()
    assert message["content"] == [{"type": "text", "text": "one two "}]
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "END"
    sampling = engine.requests[0].sampling
    assert sampling.stop == ["END", "STOP"] and sampling.include_stop_str_in_output
    events = read_events(await post(StepEngine(STOPPED), {**request, "stream": True}))
    texts = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(texts) == "one two "
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


async def test_sampling_and_user_reach_the_engine() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    request = body(temperature=0.3, top_p=0.9, top_k=5, metadata={"user_id": "u-1"})
    assert (await post(engine, request)).status_code == 200
    sampling = engine.requests[0].sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.3, 0.9, 5)
    assert sampling.max_tokens == 16
    assert engine.requests[0].client == "user:u-1"


def _png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (255, 0, 0)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


async def test_conversation_blocks_become_chat_messages() -> None:
    engine = StepEngine(THINK_THEN_ANSWER, supports_vision=True)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": _png()},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "x"},
                {"type": "redacted_thinking", "data": "opaque"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "Sunny"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "boom",
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    request = body(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=messages,
        tools=[WEATHER_TOOL],
        context_management={"edits": []},
    )
    response = await post(engine, request)
    assert response.status_code == 200, response.text
    rendered = engine.requests[0].messages
    assert rendered is not None
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert rendered[0]["content"] == "Be brief.\n\nBe kind."
    assert rendered[1]["content"] == [{"type": "text", "text": "Weather?"}, {"type": "image"}]
    assert rendered[2]["reasoning"] == "Use the tool."
    call = rendered[2]["tool_calls"][0]
    assert call["id"] == "toolu_1" and call["function"]["arguments"] == {"city": "Paris"}
    assert rendered[3] == {"role": "tool", "content": "Sunny", "tool_call_id": "toolu_1"}
    assert rendered[4]["content"] == "Error: boom"
    assert rendered[5]["content"] == "Thanks"
    assert len(engine.requests[0].images) == 1


async def test_max_tokens_over_the_context_is_clamped() -> None:
    engine = StepEngine(THINK_THEN_ANSWER, max_model_len=64)
    response = await post(engine, body(max_tokens=32000))
    assert response.status_code == 200
    assert response.headers["x-max-tokens-clamped"] == "63"
    assert engine.requests[0].sampling.max_tokens == 63


async def test_clamped_again_to_the_room_the_prompt_leaves() -> None:
    # The scripted engine counts the prompt (4 tokens here) and refuses more than the
    # rest of the context: the request runs again with exactly that rest.
    for stream in (False, True):
        engine = ScriptedEngine(max_model_len=64)
        response = await post(engine, body(max_tokens=32000, stream=stream))
        assert response.status_code == 200, response.text
        assert response.headers["x-max-tokens-clamped"] == "60"
        # The engine records a request once it passed its checks: only the run with the
        # room reached it.
        (ran,) = engine.requests
        assert ran.sampling.max_tokens == 60
        assert engine.unfinished_requests() == 0


async def test_a_prompt_over_the_context_is_still_a_400() -> None:
    engine = ScriptedEngine(max_model_len=8)
    long = [{"role": "user", "content": "word " * 20}]
    response = await post(engine, body(messages=long))
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "context length" in error["error"]["message"]


class FailingEngine(ScriptedEngine):
    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        yield GenerateOutput(prompt_tokens=3, choices=[ChoiceDelta(0, "Hel", 1)])
        raise EngineError("the engine core died")


async def test_an_error_mid_stream_is_an_error_event() -> None:
    response = await post(FailingEngine(), body(stream=True))
    assert response.status_code == 200
    events = read_events(response)
    assert events[0]["type"] == "message_start"
    assert events[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "The engine failed while serving this request."},
    }


def _anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) == {"type", "error"} and payload["type"] == "error"
    assert set(payload["error"]) == {"type", "message"}
    assert payload["error"]["type"] == kind
    message: str = payload["error"]["message"]
    return message


BAD_BODIES = [
    ({"model": "scripted", "messages": USER}, "max_tokens"),
    (body(max_tokens="16"), "max_tokens"),
    (body(max_tokens=0), "max_tokens"),
    (body(messages=[]), "messages"),
    (body(messages="hi"), "messages"),
    (body(messages=[{"role": "system", "content": "hi"}]), "role"),
    (body(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]), "type"),
    (body(messages=[{"role": "user", "content": [{"type": "text"}]}]), "text"),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}],
                }
            ]
        ),
        "assistant",
    ),
    (
        body(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}],
                }
            ]
        ),
        "user",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a",
                            "content": [
                                {"type": "image", "source": {"type": "url", "url": "http://x"}}
                            ],
                        }
                    ],
                }
            ]
        ),
        "tool_result",
    ),
    (body(temperature=1.5), "temperature"),
    (body(top_k=-1), "top_k"),
    (body(stop_sequences="END"), "stop_sequences"),
    (body(system=5), "system"),
    (body(tools=[{"name": "f"}]), "input_schema"),
    (
        body(tools=[{"type": "web_search_20250305", "name": "web_search", "input_schema": {}}]),
        "type",
    ),
    (body(tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "nope"}), "nope"),
    (body(tool_choice={"type": "any"}), "tool_choice"),
    (body(tool_choice={"type": "sometimes"}), "tool_choice"),
    (body(thinking={"type": "enabled"}), "budget_tokens"),
    (body(thinking={"type": "maybe"}), "thinking"),
    # Anthropic's bounds on the budget: at least 1024, less than max_tokens.
    (body(thinking={"type": "enabled", "budget_tokens": 1023}), "budget_tokens"),
    (body(thinking={"type": "enabled", "budget_tokens": 1024}), "less than `max_tokens` (16)"),
    (body(output_config={"effort": "extreme"}), "effort"),
    (body(metadata={"user_id": 5}), "user_id"),
    (body(tools=[WEATHER_TOOL, WEATHER_TOOL]), "Duplicate"),
]


@pytest.mark.parametrize(("payload", "named"), BAD_BODIES)
async def test_bad_input_is_a_400_in_anthropic_shape(
    client: httpx.AsyncClient, payload: dict[str, Any], named: str
) -> None:
    message = _anthropic_error(await client.post(URL, json=payload), 400, "invalid_request_error")
    assert named in message


@pytest.mark.parametrize(("payload", "named"), BAD_BODIES[3:])
async def test_bad_input_to_count_tokens(
    client: httpx.AsyncClient, payload: dict[str, Any], named: str
) -> None:
    response = await client.post(URL + "/count_tokens", json=payload)
    fields = ("max_tokens", "temperature", "top_k", "stop_sequences", "user_id")
    if named in fields or "max_tokens`" in named:
        assert response.status_code == 200  # fields count_tokens does not take
    else:
        _anthropic_error(response, 400, "invalid_request_error")


async def test_not_json_and_wrong_content_type(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, content=b"{", headers={"content-type": "application/json"})
    _anthropic_error(response, 400, "invalid_request_error")
    response = await client.post(URL, content=b"{}", headers={"content-type": "text/plain"})
    _anthropic_error(response, 415, "invalid_request_error")


async def test_unknown_model_and_route(client: httpx.AsyncClient) -> None:
    message = _anthropic_error(
        await client.post(URL, json=body(model="claude-sonnet-4")), 404, "not_found_error"
    )
    assert "claude-sonnet-4" in message
    _anthropic_error(
        await client.post(URL + "/count_tokens", json=body(model="x")), 404, "not_found_error"
    )
    _anthropic_error(await client.post(URL + "/batches", json={}), 404, "not_found_error")
    # The OpenAI routes keep OpenAI's envelope.
    response = await client.post("/v1/chat/completions", json={"model": "x", "messages": USER})
    assert response.json()["error"]["code"] == "model_not_found"


async def test_loading_model_is_overloaded_with_retry_after() -> None:
    response = await post(ScriptedEngine(ready=False), body())
    _anthropic_error(response, 503, "overloaded_error")
    assert int(response.headers["retry-after"]) >= 1


async def test_count_tokens(client: httpx.AsyncClient) -> None:
    plain = await client.post(URL + "/count_tokens", json=body(system="Be brief"))
    assert plain.status_code == 200 and plain.json()["input_tokens"] == 3  # a token a word
    with_tools = await client.post(
        URL + "/count_tokens", json=body(system="Be brief", tools=[WEATHER_TOOL])
    )
    assert with_tools.json()["input_tokens"] > 3
    image = {"type": "image", "source": {"type": "url", "url": "http://x/a.png"}}
    refused = await client.post(
        URL + "/count_tokens", json=body(messages=[{"role": "user", "content": [image]}])
    )
    _anthropic_error(refused, 400, "invalid_request_error")


async def test_x_api_key_authenticates() -> None:
    settings = Settings(api_key=("secret-key",))
    async with app_client(ScriptedEngine(), settings) as http:
        ok = await http.post(URL, json=body(), headers={"x-api-key": "secret-key"})
        assert ok.status_code == 200
        bearer = await http.post(URL, json=body(), headers={"Authorization": "Bearer secret-key"})
        assert bearer.status_code == 200
        wrong = await http.post(URL, json=body(), headers={"x-api-key": "wrong"})
        _anthropic_error(wrong, 401, "authentication_error")
        missing = await http.post(URL + "/count_tokens", json=body())
        _anthropic_error(missing, 401, "authentication_error")
        chat = await http.post(
            "/v1/chat/completions",
            json={"model": "scripted", "messages": USER},
            headers={"x-api-key": "secret-key"},
        )
        assert chat.status_code == 200
        refused = await http.get("/v1/models/scripted")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


async def test_retrieve_model_with_a_slash_in_its_id() -> None:
    engine = ScriptedEngine(served_names=("org/model-1", "alias"))
    async with app_client(engine) as http:
        card = (await http.get("/v1/models/org/model-1")).json()
        assert card["id"] == "org/model-1" and card["object"] == "model"
        assert (await http.get("/v1/models/alias")).json()["id"] == "alias"
        missing = await http.get("/v1/models/org/other")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found"


async def _sdk_final(engine: ScriptedEngine, **fields: Any) -> tuple[Any, Any]:
    """The Anthropic SDK's own parse of a whole message and of its stream's accumulation."""
    request = {"model": "scripted", "max_tokens": 16, "messages": USER, **fields}
    async with app_client(engine) as http:
        sdk = anthropic_sdk(http.app)
        whole = await sdk.messages.create(**request)
        async with sdk.messages.stream(**request) as stream:
            streamed = await stream.get_final_message()
    return whole, streamed


async def test_the_sdk_reads_thinking_and_tool_use_alike_whole_and_streamed() -> None:
    for steps, kinds in (
        (THINK_THEN_ANSWER, ["thinking", "text"]),
        (TOOL_CALL, ["text", "tool_use"]),
    ):
        whole, streamed = await _sdk_final(StepEngine(steps), tools=[WEATHER_TOOL])
        assert [block.type for block in whole.content] == kinds
        # The stream's accumulator adds `parsed_output` (None) to text blocks.
        dumps = [
            [b.model_dump(exclude={"parsed_output"}) for b in m.content] for m in (whole, streamed)
        ]
        assert dumps[0] == dumps[1]
        assert streamed.stop_reason == whole.stop_reason
        assert streamed.usage.output_tokens == whole.usage.output_tokens == 4
        assert streamed.usage.input_tokens == whole.usage.input_tokens == 3
    assert whole.content[1].input == {"city": "Paris"}
