"""Responses `tools` and `tool_choice` as chat's.

Function tools are served, and so are `namespace` groups of them: the model is offered
each namespaced function as `namespace.name` and its calls come back as `function_call`
items with `namespace` and `name` apart. Every other tool type (OpenAI's hosted tools:
`web_search*`, `file_search`, `code_interpreter`, `computer_use*`, `image_generation`,
`mcp`, `local_shell`, `custom` tools, ...) cannot run here: it is not offered to the
model, and the response names it (`tools_not_served`, and the `X-Tools-Not-Served`
header). A `tool_choice` that forces such a tool is a 400 naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from app.errors import InvalidRequest
from app.schemas.responses import FunctionTool, NamespaceTool, ToolChoiceAllowed
from app.schemas.tools import FunctionDefinition, NamedFunction, NamedToolChoice, Tool, ToolChoice
from app.services.responses.items import invalid_at, kind_of

T = TypeVar("T")

MAX_NAME = 64  # chat's bound on a function's name, which the flat name must keep


@dataclass(slots=True)
class ServedTools:
    tools: list[Tool] = field(default_factory=list)
    # The flat name the model sees -> (namespace, name) of a namespaced function.
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    not_served: list[str] = field(default_factory=list)  # tool types, in request order


_function = msgspec.json.Decoder(FunctionTool)
_namespace = msgspec.json.Decoder(NamespaceTool)


def served_tools(raw: list[msgspec.Raw] | None) -> ServedTools:
    served = ServedTools()
    for index, tool in enumerate(raw or ()):
        param = f"tools[{index}]"
        kind, _ = kind_of(tool, param)
        if kind is None:
            raise InvalidRequest("A tool needs a string `type`.", param=f"{param}.type")
        if kind == "function":
            served.tools.append(_chat_tool(_decoded(_function, tool, param)))
        elif kind == "namespace":
            group = _decoded(_namespace, tool, param)
            for inner, function in enumerate(group.tools):
                flat = f"{group.name}.{function.name}"
                if len(flat) > MAX_NAME:
                    raise InvalidRequest(
                        f"`{flat}` (namespace and name) is longer than {MAX_NAME} characters.",
                        param=f"{param}.tools[{inner}].name",
                    )
                served.namespaces[flat] = (group.name, function.name)
                served.tools.append(_chat_tool(function, flat))
        elif kind not in served.not_served:
            served.not_served.append(kind)
    return served


def _decoded(decoder: msgspec.json.Decoder[T], tool: msgspec.Raw, param: str) -> T:
    try:
        return decoder.decode(tool)
    except msgspec.ValidationError as exc:
        raise invalid_at(exc, param) from None


def _convert(value: Mapping[str, object], target: type[T], param: str) -> T:
    try:
        return msgspec.convert(value, target)
    except msgspec.ValidationError as exc:
        raise invalid_at(exc, param) from None


def _chat_tool(function: FunctionTool, name: str | None = None) -> Tool:
    return Tool(
        type="function",
        function=FunctionDefinition(
            name=name or function.name,
            description=function.description,
            parameters=function.parameters,
            strict=function.strict,
        ),
    )


def tool_choice(raw: str | Mapping[str, object] | None, served: ServedTools) -> ToolChoice | None:
    """Chat's `tool_choice`; `allowed_tools` narrows `served.tools` to those it names."""
    if raw is None or isinstance(raw, str):
        if raw not in (None, "none", "auto", "required"):
            raise InvalidRequest(
                "`tool_choice` must be `none`, `auto`, `required` or an object.",
                param="tool_choice",
            )
        return raw  # type: ignore[return-value]  # one of the literals
    kind = raw.get("type")
    if kind == "function":
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidRequest("`tool_choice.name` must be a string.", param="tool_choice.name")
        namespace = raw.get("namespace")
        flat = f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name
        return NamedToolChoice(type="function", function=NamedFunction(flat))
    if kind == "allowed_tools":
        allowed = _convert(raw, ToolChoiceAllowed, "tool_choice")
        _narrow(served, allowed)
        return allowed.mode
    raise InvalidRequest(
        f"`tool_choice` forces the `{kind}` tool, which is not served here (only function "
        "tools, and namespaces of them, are).",
        param="tool_choice",
        code="tool_not_served",
    )


def _narrow(served: ServedTools, allowed: ToolChoiceAllowed) -> None:
    names = set()
    for entry in allowed.tools:
        if entry.get("type") in ("function", None) and isinstance(entry.get("name"), str):
            namespace = entry.get("namespace")
            names.add(f"{namespace}.{entry['name']}" if namespace else entry["name"])
    served.tools = [tool for tool in served.tools if tool.function.name in names]
    if allowed.mode == "required" and not served.tools:
        raise InvalidRequest(
            "`tool_choice.tools` allows no function tool of `tools`; hosted tools are not "
            "served here.",
            param="tool_choice.tools",
            code="tool_not_served",
        )
