"""Checks and conversions of `tools`, `tool_choice` and `response_format` for the engine.

Whether a request calls tools and whether a schema is valid are decided in `engine`
(`tool_use.calls_tools`, `schema_bounds.check_schema`), once for both sides; a bad
schema's `EngineRequestError` becomes a 400 in app.errors.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, NotRequired

from app.errors import InvalidRequest
from app.schemas.chat import ChatCompletionRequest
from app.schemas.json import JsonObject, JsonValue
from app.schemas.tools import (
    FunctionCallDelta,
    FunctionDefinition,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseFormat,
    ToolCall,
    ToolCallDelta,
)
from app.services.generation.extensions import ExtensionFields, extension_fields
from app.transport.json_limits import too_deep
from engine import protocol
from engine.schema_bounds import MAX_SCHEMA_NODES, check_schema, check_schema_size
from engine.tool_use import calls_tools

# Parsed tool-call arguments are rendered by the chat template, which recurses per level.
MAX_ARGUMENTS_DEPTH = 32
# All tools' parameter schemas together: each is bounded alone too (engine.schema_bounds).
MAX_TOOLS_SCHEMA_NODES = 4 * MAX_SCHEMA_NODES


def _check_tools(request: ChatCompletionRequest) -> None:
    tools = request.tools or []
    names = [tool.function.name for tool in tools]
    seen: set[str] = set()
    for position, name in enumerate(names):
        if name in seen:
            raise InvalidRequest(
                f"Duplicate function name `{name}` in `tools`.",
                param=f"tools[{position}].function.name",
            )
        seen.add(name)
    total = 0
    for position, tool in enumerate(tools):
        if tool.function.parameters is not None:
            param = f"tools[{position}].function.parameters"
            total += check_schema_size(tool.function.parameters, param)
            if total > MAX_TOOLS_SCHEMA_NODES:
                raise InvalidRequest(
                    f"The tools' parameter schemas are too large together: at most "
                    f"{MAX_TOOLS_SCHEMA_NODES} values in all.",
                    param=param,
                    code="schema_too_large",
                )
            check_schema(tool.function.parameters, param)
    choice = request.tool_choice
    if choice is not None and choice != "none" and not tools:
        raise InvalidRequest(
            "`tool_choice` needs at least one tool in `tools`.", param="tool_choice"
        )
    if isinstance(choice, NamedToolChoice) and choice.function.name not in seen:
        raise InvalidRequest(
            f"`tool_choice` names `{choice.function.name}`, which is not in `tools`.",
            param="tool_choice",
        )


class ToolFields(ExtensionFields):
    parallel_tool_calls: bool
    tools: NotRequired[list[JsonObject]]
    tool_choice: NotRequired[str | JsonObject]


def tool_fields(request: ChatCompletionRequest) -> ToolFields:
    """GenerateRequest fields for the request's tools and response format (checked).
    Tools go to the engine only when they may be called (`engine.tool_use`)."""
    _check_tools(request)
    tools: list[JsonObject] | None = None
    tool_choice: str | JsonObject = "auto"
    if calls_tools(request.tools, request.tool_choice):
        tools = [
            {"type": "function", "function": _function_dict(tool.function)}
            for tool in request.tools or []
        ]
        choice = request.tool_choice or "auto"
        tool_choice = (
            {"type": "function", "function": {"name": choice.function.name}}
            if isinstance(choice, NamedToolChoice)
            else choice
        )
    fields: ToolFields = {
        "parallel_tool_calls": request.parallel_tool_calls,
        **extension_fields(request, response_format_constraint(request.response_format)),
    }
    if tools is not None:
        fields["tools"] = tools
        fields["tool_choice"] = tool_choice
    return fields


def response_format_constraint(
    response_format: ResponseFormat | None,
) -> protocol.StructuredOutput | None:
    """The engine constraint of `response_format` (checked); None for text."""
    if isinstance(response_format, JsonObjectFormat):
        return protocol.StructuredOutput(schema=None)
    if isinstance(response_format, JsonSchemaFormat):
        schema = response_format.json_schema.schema
        param = "response_format.json_schema.schema"
        if schema is None:
            raise InvalidRequest(f"`{param}` is required.", param=param)
        check_schema(schema, param)
        return protocol.StructuredOutput(schema=schema)
    return None


def _function_dict(function: FunctionDefinition) -> JsonObject:
    out: JsonObject = {"name": function.name}
    if function.description is not None:
        out["description"] = function.description
    out["parameters"] = function.parameters or {"type": "object", "properties": {}}
    if function.strict is not None:
        out["strict"] = function.strict
    return out


def template_tool_calls(calls: list[ToolCall]) -> list[JsonObject]:
    """Assistant tool calls as chat templates expect them (arguments as an object)."""
    rendered: list[JsonObject] = []
    for call in calls:
        text = call.function.arguments
        arguments: JsonValue = text
        # Arguments are the client's text: nested too deep to parse safely (recursion),
        # or not JSON at all, they reach the template as that text.
        if not too_deep(text, MAX_ARGUMENTS_DEPTH):
            with contextlib.suppress(ValueError):
                arguments = json.loads(text)
        rendered.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": arguments},
            }
        )
    return rendered


def wire_deltas(deltas: list[protocol.ToolCallDelta]) -> list[ToolCallDelta]:
    return [
        ToolCallDelta(
            index=d.index,
            id=d.id,
            type="function" if d.id is not None else None,
            function=FunctionCallDelta(name=d.name, arguments=d.arguments),
        )
        for d in deltas
    ]


class ToolCallCollector:
    """Joins one choice's tool-call deltas into whole calls (non-streaming responses)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def add(self, deltas: list[protocol.ToolCallDelta]) -> None:
        for delta in deltas:
            call = self._calls.setdefault(delta.index, {"id": "", "name": "", "arguments": []})
            if delta.id:
                call["id"] = delta.id
            if delta.name:
                call["name"] = delta.name
            call["arguments"].append(delta.arguments)

    def calls(self) -> list[ToolCall]:
        from app.schemas.tools import FunctionCall

        return [
            ToolCall(
                id=call["id"],
                function=FunctionCall(name=call["name"], arguments="".join(call["arguments"])),
            )
            for _, call in sorted(self._calls.items())
        ]
