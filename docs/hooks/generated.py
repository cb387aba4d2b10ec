"""MkDocs hook: the parts of the site generated from the code at build time, so they
cannot drift from it.

A page asks for one with an HTML comment on a line of its own:

- `<!-- flags: SECTION -->`: the flag table of one section of `app.config.settings` (the one
  flag table: flags, environment variables, defaults and meanings);
- `<!-- openapi -->`: the operations and schemas of the OpenAPI document
  (`app.openapi.document()`, the one `GET /openapi.json` serves);
- `<!-- include: PATH -->`: a Markdown file of the repository, such as
  `perf/RESULTS.md`, its headings moved one level down.

An unknown section, a missing file or an unknown directive fails the build.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # mkdocs loads hooks by path, not from the project root
    sys.path.insert(0, str(ROOT))

DIRECTIVE = re.compile(r"^<!-- (flags|openapi|include)(?:: (\S+))? -->$", re.MULTILINE)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return render(markdown)


def render(markdown: str) -> str:
    """The page with every directive replaced by what it names."""
    return DIRECTIVE.sub(lambda match: _expand(match.group(1), match.group(2)), markdown)


def _expand(kind: str, argument: str | None) -> str:
    if kind == "flags":
        return flag_table(argument or "")
    if kind == "openapi":
        return openapi_reference()
    return include(argument or "")


def flag_table(section: str) -> str:
    from app.config.settings import SECTIONS
    from app.config.sources import markdown_table

    if section not in SECTIONS:
        raise ValueError(f"unknown flag section {section!r}: one of {sorted(SECTIONS)}")
    return "\n".join(markdown_table(section))


def include(path: str) -> str:
    source = ROOT / path
    if not source.is_file():
        raise FileNotFoundError(f"include: {path} is not a file of the repository")
    # The included file's own title becomes a section of the page that includes it;
    # a `#` inside a fenced block is a comment, not a heading.
    lines, fenced = [], False
    for line in source.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        lines.append("#" + line if not fenced and re.match(r"#+ ", line) else line)
    return "\n".join(lines)


def openapi_reference() -> str:
    with warnings.catch_warnings():  # Litestar's deprecations are not the docs' to fix
        warnings.simplefilter("ignore", DeprecationWarning)
        from app.openapi import document

    spec = document()
    lines = ["## Operations", "", "| method | path | summary | request body | 200 |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {})
            ok = operation["responses"].get("200", {}).get("content", {})
            answers = ", ".join(
                f"{_schema_name(content)} ({media})" for media, content in ok.items()
            )
            lines.append(
                f"| `{method.upper()}` | `{path}` | {operation['summary']} "
                f"| {', '.join(_schema_name(c) for c in body.values()) or '—'} "
                f"| {answers or '—'} |"
            )
    lines += ["", "## Schemas", ""]
    for name, schema in spec["components"]["schemas"].items():
        lines += [f"### {name}", ""]
        if schema.get("description"):
            lines += [schema["description"], ""]
        lines += _schema_table(schema)
    return "\n".join(lines)


def _schema_table(schema: dict[str, Any]) -> list[str]:
    """A schema's fields as a table (objects), else the schema itself."""
    properties = schema.get("properties")
    if not properties:
        return ["```json", json.dumps(schema, indent=2, ensure_ascii=False), "```", ""]
    required = set(schema.get("required", ()))
    lines = ["| field | type | required | default | constraints |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for name, field in properties.items():
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        lines.append(
            f"| `{name}` | {_type(field)} | {'yes' if name in required else ''} "
            f"| {_cell(default)} | {_cell(_constraints(field))} |"
        )
    return [*lines, ""]


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " or ".join(_type(option) for option in schema[union])
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


CONSTRAINTS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
               "maxLength", "minItems", "maxItems", "pattern")  # fmt: skip


def _constraints(schema: dict[str, Any]) -> str:
    found = [f"{key} {json.dumps(schema[key])}" for key in CONSTRAINTS if key in schema]
    for union in ("anyOf", "oneOf"):
        for option in schema.get(union, ()):
            found += [f"{key} {json.dumps(option[key])}" for key in CONSTRAINTS if key in option]
    return ", ".join(found)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _schema_name(content: dict[str, Any]) -> str:
    schema = content.get("x-event-schema") or content.get("schema", {})
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    return "object" if schema.get("type") == "object" else "text"
