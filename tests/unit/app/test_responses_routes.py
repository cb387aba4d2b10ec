"""POST /v1/responses over scripted engines: the Response object and its items, the
request's mapping onto the engine request, hosted tools, sealed reasoning, the event
stream (read by the real `openai` SDK too), and bad input in OpenAI's error shape."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config.settings import Settings
from engine.errors import ContextLengthExceeded, EngineError
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, ToolCallDelta
from engine.scripted import ScriptedEngine
from tests.client import app_client
from tests.openai_sdk import openai_sdk

URL = "/v1/responses"


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "input": "hi", "store": False, **extra}


class StepEngine(ScriptedEngine):
    """Plays `steps` (ChoiceDelta) as one choice; remembers the requests it got."""

    def __init__(self, steps: list[ChoiceDelta], fail_after: int | None = None) -> None:
        super().__init__()
        self.steps = steps
        self.fail_after = fail_after

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.requests.append(request)
        for index, step in enumerate(self.steps):
            if index == self.fail_after:
                raise EngineError("boom")
            yield GenerateOutput(prompt_tokens=5, choices=[step], cached_tokens=2)


THINK_THEN_ANSWER = [
    ChoiceDelta(0, "", 1, reasoning="Let me ", reasoning_token_count=1),
    ChoiceDelta(0, "", 1, reasoning="think.", reasoning_token_count=1),
    ChoiceDelta(0, "Hello", 1),
    ChoiceDelta(0, "!", 1, "stop"),
]
TOOL_CALL = [
    ChoiceDelta(0, "", 1, tool_calls=[ToolCallDelta(0, "call_1", "get_weather", "")]),
    ChoiceDelta(0, "", 1, tool_calls=[ToolCallDelta(0, None, None, '{"city": ')]),
    ChoiceDelta(0, "", 1, "tool_calls", tool_calls=[ToolCallDelta(0, None, None, '"Paris"}')]),
]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


async def post(engine: ScriptedEngine, payload: dict[str, Any], **settings: Any) -> httpx.Response:
    async with app_client(engine, Settings(**settings) if settings else None) as http:
        return await http.post(URL, json=payload)


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The events of a Responses stream: `event:` names its data's `type`; no [DONE]."""
    import json

    events = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"]
        events.append(event)
    return events


# ---------------------------------------------------------------- whole responses


async def test_response_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json=body(metadata={"a": "b"}, user="u1"))
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["object"] == "response" and out["id"].startswith("resp_")
    assert out["status"] == "completed" and out["incomplete_details"] is None
    [message] = out["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"] == [
        {"type": "output_text", "text": "Hello, world!", "annotations": []}
    ]
    usage = out["usage"]
    assert usage["output_tokens"] == 4 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}
    assert out["metadata"] == {"a": "b"} and out["user"] == "u1" and out["store"] is False
    assert "tools_not_served" not in out and "x-tools-not-served" not in response.headers


async def test_max_output_tokens_is_incomplete(client: httpx.AsyncClient) -> None:
    out = (await client.post(URL, json=body(max_output_tokens=2))).json()
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["output"][0]["status"] == "incomplete"
    assert out["output"][0]["content"][0]["text"] == "Hello,"


async def test_reasoning_item_usage_and_effort() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    out = (await post(engine, body(reasoning={"effort": "low", "summary": "auto"}))).json()
    reasoning, message = out["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
    assert reasoning["summary"] == [] and "encrypted_content" not in reasoning
    assert message["content"][0]["text"] == "Hello!"
    assert out["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}
    assert out["usage"]["input_tokens_details"] == {"cached_tokens": 2}
    assert out["usage"]["input_tokens"] == 5
    assert engine.requests[0].reasoning_controls == {"reasoning_effort": "low"}
    assert out["reasoning"] == {"effort": "low", "summary": "auto"}


async def test_items_become_the_prompt() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Weather?"}],
        },
        {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Hm."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is sunny."}],
        },
        {"role": "user", "content": "Thanks"},
    ]
    response = await post(engine, body(instructions="You help.", input=items, tools=[WEATHER]))
    assert response.status_code == 200, response.text
    messages = engine.requests[0].messages
    assert [m["role"] for m in messages] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[0]["content"] == "You help." and messages[1]["content"] == "Be brief."
    assert messages[3]["reasoning"] == "Hm."
    assert messages[3]["tool_calls"][0]["id"] == "c1"
    assert messages[3]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {}}
    assert messages[4] == {"role": "tool", "content": "Sunny", "tool_call_id": "c1"}
    assert messages[5]["content"] == "It is sunny."


async def test_function_call_items_and_tool_choice() -> None:
    engine = StepEngine(TOOL_CALL)
    request = body(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"})
    out = (await post(engine, request)).json()
    [call] = out["output"]
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert call["call_id"] == "call_1" and call["name"] == "get_weather"
    assert call["arguments"] == '{"city": "Paris"}' and call["status"] == "completed"
    generate = engine.requests[0]
    assert generate.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert generate.tools is not None and generate.tools[0]["function"]["name"] == "get_weather"


async def test_namespaced_functions() -> None:
    steps = [
        ChoiceDelta(0, "", 1, "tool_calls", tool_calls=[ToolCallDelta(0, "c9", "crm.find", "{}")])
    ]
    engine = StepEngine(steps)
    group = {
        "type": "namespace",
        "name": "crm",
        "description": "Customers",
        "tools": [{"type": "function", "name": "find", "parameters": {"type": "object"}}],
    }
    history = [
        {"role": "user", "content": "find"},
        {
            "type": "function_call",
            "call_id": "c0",
            "namespace": "crm",
            "name": "find",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c0", "output": "none"},
    ]
    out = (await post(engine, body(input=history, tools=[group], tool_choice="required"))).json()
    [call] = out["output"]
    assert call["namespace"] == "crm" and call["name"] == "find"
    generate = engine.requests[0]
    assert generate.tools is not None and generate.tools[0]["function"]["name"] == "crm.find"
    assert generate.messages[1]["tool_calls"][0]["function"]["name"] == "crm.find"


async def test_hosted_tools_are_named_not_offered() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    tools = [{"type": "web_search"}, WEATHER, {"type": "mcp", "server_label": "x"}]
    response = await post(engine, body(tools=tools))
    assert response.status_code == 200, response.text
    assert response.headers["x-tools-not-served"] == "web_search,mcp"
    assert response.json()["tools_not_served"] == ["web_search", "mcp"]
    offered = engine.requests[0].tools
    assert offered is not None and [t["function"]["name"] for t in offered] == ["get_weather"]
    hosted_only = StepEngine(THINK_THEN_ANSWER)
    assert (await post(hosted_only, body(tools=[{"type": "file_search"}]))).status_code == 200
    assert hosted_only.requests[0].tools is None


@pytest.mark.parametrize(
    "choice",
    [{"type": "web_search_preview"}, {"type": "mcp", "server_label": "x"}, {"type": "file_search"}],
)
async def test_tool_choice_forcing_a_hosted_tool_is_a_400(
    client: httpx.AsyncClient, choice: dict[str, Any]
) -> None:
    tools = [{"type": choice["type"]}, WEATHER]
    response = await client.post(URL, json=body(tools=tools, tool_choice=choice))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tool_choice" and error["code"] == "tool_not_served"
    assert choice["type"] in error["message"]


async def test_required_with_hosted_tools_only_is_a_400(client: httpx.AsyncClient) -> None:
    request = body(tools=[{"type": "code_interpreter"}], tool_choice="required")
    response = await client.post(URL, json=request)
    assert response.status_code == 400 and "code_interpreter" in response.json()["error"]["message"]


async def test_allowed_tools_narrow_the_offer() -> None:
    engine = StepEngine(TOOL_CALL)
    other = {**WEATHER, "name": "other"}
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    assert (await post(engine, body(tools=[WEATHER, other], tool_choice=choice))).status_code == 200
    generate = engine.requests[0]
    assert generate.tools is not None and [t["function"]["name"] for t in generate.tools] == [
        "get_weather"
    ]
    assert generate.tool_choice == "required"


async def test_text_format_is_the_structured_output_path() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 4}}}
    text = {"format": {"type": "json_schema", "name": "r", "schema": schema, "strict": True}}
    out = (await post(engine, body(text=text))).json()
    constraint = engine.requests[0].response_format
    assert constraint is not None and constraint.schema == schema
    assert out["text"]["format"]["type"] == "json_schema"
    engine = StepEngine(THINK_THEN_ANSWER)
    await post(engine, body(text={"format": {"type": "json_object"}}))
    constraint = engine.requests[0].response_format
    assert constraint is not None and constraint.schema is None


async def test_sampling_fields_reach_the_engine() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    request = body(temperature=0.5, top_p=0.9, max_output_tokens=7, top_logprobs=2)
    out = (await post(engine, request)).json()
    sampling = engine.requests[0].sampling
    assert (sampling.temperature, sampling.top_p, sampling.max_tokens) == (0.5, 0.9, 7)
    assert sampling.logprobs == 2
    assert out["temperature"] == 0.5 and out["top_logprobs"] == 2


# ---------------------------------------------------------------- sealed reasoning


async def test_encrypted_reasoning_round_trip(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path))
    engine = StepEngine(THINK_THEN_ANSWER)
    async with app_client(engine, settings) as http:
        first = await http.post(URL, json=body(include=["reasoning.encrypted_content"]))
        reasoning = first.json()["output"][0]
        sealed = reasoning["encrypted_content"]
        assert "think" not in sealed
        follow = [
            {"role": "user", "content": "hi"},
            {
                "type": "reasoning",
                "id": reasoning["id"],
                "summary": [],
                "encrypted_content": sealed,
            },
            first.json()["output"][1],
            {"role": "user", "content": "again"},
        ]
        second = await http.post(URL, json=body(input=follow))
        assert second.status_code == 200, second.text
        assert engine.requests[1].messages[1]["reasoning"] == "Let me think."
        forged = sealed[:-6] + ("AAAAAA" if not sealed.endswith("AAAAAA") else "BBBBBB")
        follow[1]["encrypted_content"] = forged
        refused = await http.post(URL, json=body(input=follow))
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["param"] == "input[1].encrypted_content"
        assert error["code"] == "invalid_encrypted_content"
    assert (tmp_path / "responses-reasoning.key").stat().st_mode & 0o777 == 0o600


async def test_another_servers_secret_cannot_open_a_blob(tmp_path: Path) -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    async with app_client(engine, Settings(data_dir=str(tmp_path / "a"))) as http:
        first = await http.post(URL, json=body(include=["reasoning.encrypted_content"]))
    sealed = first.json()["output"][0]["encrypted_content"]
    item = {"type": "reasoning", "summary": [], "encrypted_content": sealed}
    async with app_client(engine, Settings(data_dir=str(tmp_path / "b"))) as http:
        refused = await http.post(URL, json=body(input=[item, {"role": "user", "content": "x"}]))
    assert (
        refused.status_code == 400
        and refused.json()["error"]["param"] == "input[0].encrypted_content"
    )


# ---------------------------------------------------------------- streams


async def test_stream_event_sequence() -> None:
    engine = StepEngine(THINK_THEN_ANSWER)
    response = await post(engine, body(stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] == 4
    assert [item["id"] for item in final["output"]] == [
        events[8]["item"]["id"],
        events[15]["item"]["id"],
    ]
    assert events[13]["text"] == "Hello!"


async def test_stream_of_a_function_call() -> None:
    response = await post(StepEngine(TOOL_CALL), body(stream=True, tools=[WEATHER]))
    events = events_of(response)
    kinds = [e["type"] for e in events]
    assert kinds[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2]["item"]["call_id"] == "call_1" and events[2]["item"]["arguments"] == ""
    assert events[5]["arguments"] == '{"city": "Paris"}' and events[5]["name"] == "get_weather"


async def test_error_mid_stream_is_an_error_event_then_failed() -> None:
    response = await post(StepEngine(THINK_THEN_ANSWER, fail_after=2), body(stream=True))
    events = events_of(response)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == "engine_error"
    assert events[-1]["response"]["status"] == "failed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_the_sdk_reads_whole_and_streamed_responses() -> None:
    async with app_client(StepEngine(THINK_THEN_ANSWER)) as http:
        sdk = openai_sdk(http.app)
        whole = await sdk.responses.create(model="scripted", input="hi", store=False)
        assert whole.output_text == "Hello!"
        assert whole.usage is not None and whole.usage.output_tokens_details.reasoning_tokens == 2
        async with sdk.responses.stream(model="scripted", input="hi", store=False) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        assert final.output_text == "Hello!" and kinds[-1] == "response.completed"
        raw = await sdk.responses.create(model="scripted", input="hi", store=False, stream=True)
        assert [e.sequence_number async for e in raw][:2] == [0, 1]


async def test_the_sdk_streams_a_function_call() -> None:
    async with app_client(StepEngine(TOOL_CALL)) as http:
        sdk = openai_sdk(http.app)
        async with sdk.responses.stream(
            model="scripted", input="hi", store=False, tools=[WEATHER]
        ) as stream:
            final = await stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.arguments == '{"city": "Paris"}'


# ---------------------------------------------------------------- truncation


class Context(ScriptedEngine):
    """A context that holds `fits` messages: more is the engine's context error."""

    def __init__(self, fits: int) -> None:
        super().__init__()
        self.fits = fits

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.requests.append(request)
        if len(request.messages) > self.fits:
            raise ContextLengthExceeded(100 * len(request.messages), 10, 100 * self.fits + 10)
        yield GenerateOutput(prompt_tokens=5, choices=[ChoiceDelta(0, "ok", 1, "stop")])


LONG = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(9)]


async def test_truncation_auto_drops_the_oldest_items() -> None:
    engine = Context(fits=4)
    out = await post(engine, body(input=LONG, instructions="sys", truncation="auto"))
    assert out.status_code == 200, out.text
    kept = engine.requests[-1].messages
    assert len(kept) <= 4 and kept[0] == {"role": "system", "content": "sys"}
    assert kept[-1]["content"] == "m8"
    assert out.json()["truncation"] == "auto"


async def test_truncation_disabled_is_a_400_naming_this_apis_field() -> None:
    refused = await post(Context(fits=4), body(input=LONG, max_output_tokens=10))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_output_tokens"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"input": 3}, "input"),
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type"),
        ({"input": [{"content": "no type, no role"}]}, "input[0].type"),
        ({"input": [{"type": "message", "role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"role": "critic", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
        ),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        (
            {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "junk"}]},
            "input[0].encrypted_content",
        ),
        ({"input": []}, "input"),
        ({"tools": [{"name": "no type"}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
        (
            {"text": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}},
            "text.format.schema",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"include": ["everything"]}, "include[0]"),
        ({"background": True}, "background"),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"metadata": {"k": 1}}, "metadata[...]"),
        ({"conversation": "conv_1"}, "conversation"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    client: httpx.AsyncClient, extra: dict[str, Any], param: str
) -> None:
    response = await client.post(URL, json=body(**extra))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error


async def test_previous_response_id_of_nothing_stored_is_a_404(tmp_path: Path) -> None:
    response = await post(
        ScriptedEngine(), body(previous_response_id="resp_nope"), data_dir=str(tmp_path)
    )
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "previous_response_id"


async def test_unknown_model_is_a_404(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json=body(model="nope"))
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"


async def test_a_tool_type_that_is_no_plain_name_stays_out_of_the_header() -> None:
    """A client's tool `type` is copied into the header only when it is a plain name: a
    line break or a colon there could forge a header of the client's choosing."""
    engine = StepEngine(THINK_THEN_ANSWER)
    forged = "web_search\r\nSet-Cookie: session=forged"
    response = await post(engine, body(tools=[{"type": forged}, {"type": "mcp"}]))
    assert response.status_code == 200, response.text
    assert response.headers["x-tools-not-served"] == "mcp"
    assert "set-cookie" not in response.headers
    assert response.json()["tools_not_served"] == [forged, "mcp"]  # named in the body
