"""Bad tool definitions and response formats are 400s that name the field."""

import httpx
import pytest

from engine.scripted import ScriptedEngine

URL = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def tool(name: str = "f", parameters: object = None) -> dict:
    function: dict = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({"tools": [tool("bad name!")]}, "tools[0].function.name"),
        ({"tools": [tool(), tool()]}, "tools[1].function.name"),
        ({"tools": [tool(parameters={"type": "nope"})]}, "tools[0].function.parameters"),
        ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
        ({"tools": [tool()], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tools": [tool()], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [], "tool_choice": "auto"}, "tool_choice"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": 5}},
                }
            },
            "response_format.json_schema.schema",
        ),
    ],
)
async def test_bad_tools_and_formats(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, fields: dict, param: str
) -> None:
    response = await client.post(URL, json={"model": "scripted", "messages": MESSAGES, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert scripted_engine.requests == []


async def test_tool_history_is_accepted(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    response = await client.post(
        URL, json={"model": "scripted", "messages": messages, "tools": [tool()]}
    )
    assert response.status_code == 200
    sent = scripted_engine.requests[0]
    assert sent.messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert sent.messages[2] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}
    assert sent.tools[0]["function"]["name"] == "f"
    assert sent.tool_choice == "auto"
