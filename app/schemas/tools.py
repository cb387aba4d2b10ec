"""Wire types of tool calling and structured output: `tools`, `tool_choice`,
`response_format`, and the `tool_calls` of messages, responses and deltas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

FunctionName = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]


class FunctionDefinition(Struct, kw_only=True):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Struct, kw_only=True):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Struct):
    name: str


class NamedToolChoice(Struct, kw_only=True):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class TextFormat(Struct, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(Struct, tag_field="type", tag="json_object"):
    pass


class JsonSchemaSpec(Struct, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=64)] = "response"
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class JsonSchemaFormat(Struct, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat


# ---------------------------------------------------------------- calls in messages


class FunctionCall(Struct):
    name: str
    arguments: str  # a JSON document, as a string


class ToolCall(Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionCallDelta(Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Struct, kw_only=True, omit_defaults=True):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta
