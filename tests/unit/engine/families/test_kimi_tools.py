"""Kimi's TypeScript tool declarations, against text worked out from the rules of Moonshot's
`tool_declaration_ts.py` (required fields first, by name; `//` comments for descriptions,
constraints and defaults; `integer` as `number`; `$defs` as interfaces)."""

from typing import Any

import pytest

from engine.families.kimi_tools import deep_sorted, template_context, tools_ts_str


def tool(name: str, parameters: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, **extra}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def declared(*bodies: str) -> str:
    return "# Tools\n\n## functions\nnamespace functions {\n" + "\n".join(bodies) + "\n}\n"


def test_fields_required_first_then_by_name_with_comments() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "zone": {"type": "string", "description": "Time zone"},
            "city": {"type": "string", "description": "City\nor town", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "exact": {"type": "boolean", "default": False},
        },
        "required": ["zone", "city"],
    }
    text = tools_ts_str([tool("weather", parameters, description="Weather now.")])
    assert text == declared(
        "// Weather now.\n"
        "type weather = (_: {\n"
        "  // City\n  // or town\n  // minLength: 1\n  city: string,\n"
        "  // Time zone\n  zone: string,\n"
        "  // maximum: 7, minimum: 1\n  days?: number,\n"
        "  // Default: False\n  exact?: boolean,\n"
        '  // Default: "c"\n  unit?: "c" | "f"\n'
        "}) => any;"
    )


def test_nested_objects_arrays_unions_and_maps() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "when": {"type": "object", "properties": {"hour": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string", "description": "a tag"}},
            "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "size": {"type": ["number", "null"]},
            "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
            "any": {},
        },
        "required": [],
    }
    assert tools_ts_str([tool("f", parameters)]) == declared(
        "type f = (_: {\n"
        "  any?: any,\n"
        "  // minItems: 1\n  ids?: Array<number>,\n"
        "  meta?: {\n    [k: string]: number\n  },\n"
        "  note?: string | null,\n"
        "  size?: number | null,\n"
        "  tags?: Array<\n    // a tag\n    string\n  >,\n"
        "  when?: {\n    hour?: number\n  }\n"
        "}) => any;"
    )


def test_defs_become_interfaces() -> None:
    parameters = {
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/Point"}},
        "required": ["p"],
        "$defs": {
            "Point": {
                "type": "object",
                "description": "A point",
                "properties": {"x": {"type": "number"}},
                "required": ["x"],
            }
        },
    }
    assert tools_ts_str([tool("f", parameters)]) == declared(
        "// A point\ninterface Point {\n  x: number\n}\ntype f = (_: {\n  p: Point\n}) => any;"
    )


def test_no_parameters_no_tools_and_other_tool_types() -> None:
    assert tools_ts_str([tool("ping")]) == declared("type ping = (_: {}) => any;")
    assert tools_ts_str(None) is None and template_context([]) == {}
    assert tools_ts_str([{"type": "_plugin", "function": {"name": "x"}}]) == "# Tools\n\n"
    ping = declared("type ping = (_: {}) => any;")
    assert template_context([tool("ping")]) == {"tools_ts_str": ping}


def test_keys_are_sorted_all_the_way_down_lists_keep_their_order() -> None:
    assert deep_sorted({"b": [{"d": 1, "c": 2}], "a": 0}) == {"a": 0, "b": [{"c": 2, "d": 1}]}
    assert list(deep_sorted({"b": 1, "a": 2})) == ["a", "b"]


def test_a_bad_reference_falls_back_to_json_declarations() -> None:
    parameters = {"type": "object", "properties": {"p": {"$ref": "#/$defs/Missing"}}}
    with pytest.raises(ValueError, match="Reference not found"):
        tools_ts_str([tool("f", parameters)])
    assert template_context([tool("f", parameters)]) == {}  # the template writes JSON
