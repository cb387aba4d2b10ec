"""Kimi K2.5/K2.6 tool declarations: OpenAI tools -> the TypeScript `namespace functions`
text Moonshot's tokenizer hands its chat template as `tools_ts_str`.

The rules follow Moonshot's `tool_declaration_ts.py` (`encode_tools_to_typescript_style`,
shipped with the K2.5/K2.6 tokenizer; a copy lives in thinking-machines-lab/tinker-cookbook
as `tinker_cookbook/renderers/kimi_k2_5_tool_declaration_ts.py`), applied after the
tokenizer's `deep_sort_dict` of the tools. Parameters are listed required first, each
group by name; descriptions, constraints and defaults become `//` comments;
`integer` reads `number`; `$defs` become interfaces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

INDENT = "  "
_CONSTRAINTS = {
    "string": ("maxLength", "minLength", "pattern"),
    "number": ("maximum", "minimum"),
    "integer": ("maximum", "minimum"),
    "array": ("minItems", "maxItems"),
}
_UNION_NAMES = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "{}",
    "array": "Array<any>",
}


def deep_sorted(value: Any) -> Any:
    """Mappings with their keys sorted, all the way down (the tokenizer's first step)."""
    if isinstance(value, Mapping):
        return {key: deep_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [deep_sorted(item) for item in value]
    return value


def tools_ts_str(tools: list[dict[str, Any]] | None) -> str | None:
    """The `tools_ts_str` template variable for `tools`; None when there are none."""
    if not tools:
        return None
    functions = [
        _function(tool["function"])
        for tool in deep_sorted(tools)
        if tool.get("type") == "function" and tool.get("function")
    ]
    text = "# Tools\n\n"
    if functions:
        text += "## functions\nnamespace functions {\n" + "\n".join(functions) + "\n}\n"
    return text


def template_context(tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Extra template variables for a request with `tools` (the family's hook). A schema
    the encoder cannot express falls back to the template's JSON declaration, as the
    tokenizer falls back."""
    try:
        text = tools_ts_str(tools)
    except ValueError:
        return {}
    return {"tools_ts_str": text} if text is not None else {}


def _comment(text: str, indent: str = "") -> str:
    return "\n".join(f"{indent}// {line}" if line else "" for line in text.split("\n"))


class _Schema:
    """One JSON schema node and the `$defs` it may refer to."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.self_ref = False

    def kind(self, schema: Any) -> str:
        if isinstance(schema, bool):
            return "scalar"
        if "$ref" in schema:
            return "ref"
        if "anyOf" in schema:
            return "anyOf"
        if "enum" in schema:
            return "enum"
        if "type" in schema:
            kind = schema["type"]
            if isinstance(kind, list):
                return "union"
            return kind if kind in ("object", "array") else "scalar"
        if schema == {}:
            return "scalar"
        raise ValueError(f"Invalid JSON Schema object: {schema}")

    def docstring(self, schema: Any, indent: str) -> str:
        """The `//` lines above a field: its description, then its constraints."""
        if isinstance(schema, bool):
            return ""
        lines = []
        if schema.get("description"):
            lines.append(_comment(schema["description"], indent))
        kind = self.kind(schema)
        allowed: tuple[str, ...] = ()
        if kind == "scalar":
            allowed = _CONSTRAINTS.get(schema.get("type", ""), ())
        elif kind == "array":
            allowed = _CONSTRAINTS["array"]
        constraints = {k: v for k, v in schema.items() if k in allowed}
        if constraints:
            joined = ", ".join(f"{k}: {v}" for k, v in sorted(constraints.items()))
            lines.append(f"{indent}// {joined}")
        return "".join(line + "\n" for line in lines)

    def type_text(self, schema: Any, indent: str = "") -> str:
        if isinstance(schema, bool):
            return "any" if schema else "null"
        kind = self.kind(schema)
        if kind == "ref":
            ref = schema["$ref"]
            if ref == "#":
                self.self_ref = True
                return "parameters"
            if not ref.startswith("#/$defs/") or ref.split("/")[-1] not in self.defs:
                raise ValueError(f"Reference not found: {ref}")
            return str(ref.split("/")[-1])
        if kind == "anyOf":
            return " | ".join(self.type_text(option, indent) for option in schema["anyOf"])
        if kind == "enum":
            return " | ".join(f'"{e}"' if isinstance(e, str) else str(e) for e in schema["enum"])
        if kind == "union":
            return " | ".join(_UNION_NAMES[t] for t in schema["type"])
        if kind == "object":
            return self.object_text(schema, indent)
        if kind == "array":
            return self.array_text(schema, indent)
        scalar = schema.get("type", "any")
        return "number" if scalar == "integer" else str(scalar)

    def array_text(self, schema: dict[str, Any], indent: str) -> str:
        item = schema.get("items") or {}
        inner = indent + INDENT
        doc = self.docstring(item, inner)
        if doc:
            return f"Array<\n{doc}{inner}{self.type_text(item, inner)}\n{indent}>"
        return f"Array<{self.type_text(item, indent)}>"

    def fields(
        self, schema: dict[str, Any], indent: str, ordered_by_name: bool = True
    ) -> list[str]:
        """Required fields first, each group by name (the self-referencing root interface
        keeps the schema's order, as the tokenizer does)."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required", []))
        ordered = list(properties)
        if ordered_by_name:
            ordered = sorted(n for n in properties if n in required)
            ordered += sorted(n for n in properties if n not in required)
        return [self.field(n, properties[n], n not in required, indent) for n in ordered]

    def field(self, name: str, schema: Any, optional: bool, indent: str) -> str:
        text = self.docstring(schema, indent)
        default = schema.get("default") if isinstance(schema, dict) else None
        if default is not None:
            shown = (
                repr(default)
                if isinstance(default, (int, float, bool))
                else json.dumps(default, ensure_ascii=False)
            )
            text += f"{indent}// Default: {shown}\n"
        mark = "?" if optional else ""
        return f"{text}{indent}{name}{mark}: {self.type_text(schema, indent)}"

    def object_text(self, schema: dict[str, Any], indent: str = "") -> str:
        if "$defs" in schema:
            self.defs.update(schema["$defs"])
        parts = self.fields(schema, indent + INDENT) if "properties" in schema else []
        extra = schema.get("additionalProperties")
        if extra is not None:
            if extra is True:
                extra_text = "any"
            elif extra is False:
                extra_text = "never"
            elif isinstance(extra, dict):
                extra_text = self.type_text(extra, indent + INDENT)
            else:
                raise ValueError(f"Unknown additionalProperties: {extra}")
            parts.append(f"{indent + INDENT}[k: string]: {extra_text}")
        if not parts:
            return "{}"
        return "{\n" + ",\n".join(parts) + f"\n{indent}}}"


def _function(function: dict[str, Any]) -> str:
    schema = _Schema({})
    parameters = function.get("parameters") or {}
    params_text = schema.object_text(parameters)
    interfaces = []
    if schema.self_ref:
        fields = ",\n".join(schema.fields(parameters, INDENT, ordered_by_name=False))
        interfaces.append("interface parameters {" + (f"\n{fields}\n" if fields else "") + "}")
    for name, definition in dict(schema.defs).items():
        described = definition.get("description", "")
        prefix = _comment(described) + "\n" if described else ""
        interfaces.append(f"{prefix}interface {name} {schema.type_text(definition)}")
    name = function.get("name", "function")
    if schema.self_ref:
        declaration = f"type {name} = (_: parameters) => any;"
    else:
        declaration = f"type {name} = (_: {params_text}) => any;"
    description = function.get("description")
    parts = ["\n".join(interfaces), _comment(description) if description else "", declaration]
    return "\n".join(part for part in parts if part)
