"""Structured output and tool calls through the real engine: valid JSON every time."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.client import stream_events

URL = "/v1/chat/completions"
MODEL = DEFAULT_MODEL_NAME

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "location": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
            },
        },
        "required": ["city", "location"],
    },
    "array_of_items": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
                    "required": ["name", "count"],
                },
                "minItems": 1,
            }
        },
        "required": ["items"],
    },
    "enum_and_bounds": {
        "type": "object",
        "properties": {
            "mood": {"enum": ["happy", "sad", "neutral"]},
            "score": {"type": "integer", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
            "ok": {"type": "boolean"},
        },
        "required": ["mood", "score", "ratio", "ok"],
    },
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


async def post(client: httpx.AsyncClient, **fields: object) -> dict:
    response = await client.post(URL, json={"model": MODEL, "max_tokens": 80, **fields})
    assert response.status_code == 200, response.text
    return response.json()


async def test_json_object(real_client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "Describe a cat as a JSON object."}]
    result = await post(
        real_client, messages=messages, response_format={"type": "json_object"}, temperature=0
    )
    assert isinstance(json.loads(result["choices"][0]["message"]["content"]), dict)


@pytest.mark.parametrize("name", list(SCHEMAS))
async def test_json_schema_validates(real_client: httpx.AsyncClient, name: str) -> None:
    schema = SCHEMAS[name]
    messages = [{"role": "user", "content": f"Give me an example {name} record as JSON."}]
    result = await post(
        real_client,
        messages=messages,
        temperature=0,
        max_tokens=150,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
    )
    choice = result["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_time"}}],
    ids=["required", "named"],
)
async def test_forced_tool_calls_validate(
    real_client: httpx.AsyncClient, tool_choice: object
) -> None:
    # Greedy: at temperature 1 a 135M model may go on opening calls (all valid, as
    # `required` allows several) until max_tokens ends the list.
    result = await post(
        real_client, messages=ASK, tools=TOOLS, tool_choice=tool_choice, temperature=0
    )
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert calls
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        jsonschema.validate(
            json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]]
        )
    if isinstance(tool_choice, dict):
        assert [c["function"]["name"] for c in calls] == ["get_time"]


async def test_tool_choice_none_gives_text(real_client: httpx.AsyncClient) -> None:
    result = await post(real_client, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=10)
    message = result["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"]


async def test_parallel_tool_calls_false_gives_one_call(real_client: httpx.AsyncClient) -> None:
    result = await post(
        real_client,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=1.0,
        seed=11,
    )
    assert len(result["choices"][0]["message"]["tool_calls"]) == 1


async def test_streamed_tool_call_reassembles(real_client: httpx.AsyncClient) -> None:
    fields = {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "temperature": 0}
    plain = await post(real_client, **fields)
    response = await real_client.post(
        URL, json={"model": MODEL, "max_tokens": 80, "stream": True, **fields}
    )
    chunks = stream_events(response)
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in chunk["choices"][0]["delta"].get("tool_calls") or []:
            call = calls.setdefault(delta["index"], {"name": None, "arguments": ""})
            if delta.get("id"):
                assert call["name"] is None  # id and name come first, once
                call["name"] = delta["function"]["name"]
            call["arguments"] += delta["function"].get("arguments", "")
    expected = plain["choices"][0]["message"]["tool_calls"]
    assert [c["name"] for c in calls.values()] == [c["function"]["name"] for c in expected]
    assert [json.loads(c["arguments"]) for c in calls.values()] == [
        json.loads(c["function"]["arguments"]) for c in expected
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_two_turn_conversation_with_tool_result(real_client: httpx.AsyncClient) -> None:
    first = await post(
        real_client, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0
    )
    call = first["choices"][0]["message"]["tool_calls"][0]
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": '{"temperature": 21, "sky": "sunny"}',
        },
    ]
    second = await post(real_client, messages=messages, tools=TOOLS, max_tokens=30, temperature=0)
    assert second["choices"][0]["message"]["content"]
    tokenized = await real_client.post("/tokenize", json={"model": MODEL, "messages": messages})
    assert tokenized.status_code == 200
