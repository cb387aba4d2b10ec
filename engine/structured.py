"""response_format and tools -> xgrammar constraints (through vLLM's structured outputs).

A grammar alone does not make a small model's output valid: an unbounded
integer, string or array lets it run on until `max_tokens` cuts the JSON off
(measured on SmolLM2). So every schema is tightened before it is compiled:
strings, arrays and numbers get bounds and objects lose undeclared properties.
A document valid for the tightened schema is valid for the original one.
"""

from __future__ import annotations

import json
from typing import Any

from engine.errors import EngineRequestError
from engine.protocol import GenerateRequest

MAX_STRING = 200
MAX_ITEMS = 16
MAX_PROPERTIES_FREE = 8  # objects that declare no properties
INTEGER_BOUND = 10**9
NUMBER_BOUND = 1e9

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_SINGLE = ("items", "not", "if", "then", "else", "contains")


def tighten(schema: Any) -> Any:
    """A copy of `schema` whose every unbounded string, array, number and object is bounded."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [tighten(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: tighten(s) for name, s in out[key].items()}
    for key in _SUBSCHEMA_SINGLE:
        if isinstance(out.get(key), dict):
            out[key] = tighten(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = tighten(out["additionalProperties"])
    if "enum" in out or "const" in out:
        return out
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if "string" in kinds and "maxLength" not in out and "format" not in out:
        out["maxLength"] = max(MAX_STRING, out.get("minLength", 0))
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = max(MAX_ITEMS, out.get("minItems", 0))
    if "integer" in kinds:
        out.setdefault("minimum", -INTEGER_BOUND)
        out.setdefault("maximum", INTEGER_BOUND)
    elif "number" in kinds:
        out.setdefault("minimum", -NUMBER_BOUND)
        out.setdefault("maximum", NUMBER_BOUND)
    if "object" in kinds and "additionalProperties" not in out:
        out["additionalProperties"] = False if "properties" in out else _ANY_SCALAR
        if "properties" not in out:
            out.setdefault("maxProperties", MAX_PROPERTIES_FREE)
    return out


# What `json_object` admits as a property value: short scalars and flat lists.
_ANY_SCALAR: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": 80},
        {"type": "integer", "minimum": -INTEGER_BOUND, "maximum": INTEGER_BOUND},
        {"type": "number", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "maxItems": MAX_ITEMS, "items": {"type": "string", "maxLength": 60}},
    ]
}

JSON_OBJECT_SCHEMA = tighten({"type": "object"})


def check_schema(schema: dict[str, Any], param: str) -> None:
    """Reject a schema that is not a valid JSON Schema, naming where it is wrong."""
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise EngineRequestError(
            f"Invalid JSON schema at {where}: {exc.message}", param=param
        ) from None


def json_schema_constraint(schema: dict[str, Any] | None) -> Any:
    """StructuredOutputsParams for response_format json_schema (None: json_object)."""
    from vllm.sampling_params import StructuredOutputsParams

    target = JSON_OBJECT_SCHEMA if schema is None else tighten(schema)
    # The engine is built with disable_any_whitespace: no free whitespace in the JSON.
    return StructuredOutputsParams(json=json.dumps(target))


def constraint_for(request: GenerateRequest, tool_parser: str) -> Any:
    """The structured-output constraint of a request, or None when its output is free."""
    from engine.tool_calls import ToolRequest, structural_tag

    calls_tools = bool(request.tools) and request.tool_choice != "none"
    if calls_tools and request.response_format is not None:
        raise EngineRequestError(
            "`response_format` cannot be combined with tool calls; set `tool_choice` to "
            '"none" or drop `response_format`.',
            param="response_format",
        )
    if calls_tools:
        tool_request = ToolRequest(
            request.tools or [], request.tool_choice, request.parallel_tool_calls
        )
        return structural_tag(tool_request, tool_parser)
    if request.response_format is not None:
        schema = request.response_format.schema
        if schema is not None:
            check_schema(schema, "response_format.json_schema.schema")
        return json_schema_constraint(schema)
    return None
