"""Tool calling in the model's own format: the grammar that constrains calls, and the
parser that turns generated text back into OpenAI tool-call deltas.

Both come from vLLM by the names `vllm serve` uses: the tool parser (`hermes`,
`kimi_k2`, `glm47`, ...) and the xgrammar structural-tag model of the same
format. Arguments are constrained in every `tool_choice` mode, `auto` included:
free text stays free, and a call, once opened, can only finish valid.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineRequestError
from engine.protocol import ToolCallDelta
from engine.schema_bounds import fit_to_budget

# What vLLM's kimi_k2 parser accepts as a call id (it reads the function name from it).
KIMI_CALL_ID = re.compile(r"functions\.[^:]+:\d+")


@dataclass(frozen=True, slots=True)
class ToolRequest:
    tools: list[dict[str, Any]]  # OpenAI-shaped: {"type": "function", "function": {...}}
    tool_choice: str | dict[str, Any]  # "auto" | "required" | {"type": "function", ...}
    parallel_tool_calls: bool = True


def structural_tag(
    request: ToolRequest, parser_name: str, arguments_budget: int | None = None
) -> Any:
    """StructuredOutputsParams holding the structural tag for this request's tools."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionToolsParam,
    )
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.structural_tag_registry import (
        get_model_structural_tag,
        limit_to_single_tool_call,
    )
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    tag_model = structural_tag_model(parser_name)
    if tag_model is None:
        if request.tool_choice == "auto":
            return None  # the parser still finds calls; their arguments are unconstrained
        raise EngineRequestError(
            f"`tool_choice` other than auto/none is not available with the "
            f"`{parser_name}` tool-call format.",
            param="tool_choice",
        )
    tools = [
        ChatCompletionToolsParam.model_validate(_tightened(t, arguments_budget))
        for t in request.tools
    ]
    choice: Any = request.tool_choice
    if isinstance(choice, dict):
        choice = ChatCompletionNamedToolChoiceParam.model_validate(choice)
    tag = get_model_structural_tag(
        model=tag_model,
        tools=tools,
        tool_choice=choice,
        reasoning=False,
        strict_level=ToolStrictLevel.PARAMETER,
    )
    if tag is None:
        return None
    if not request.parallel_tool_calls:
        tag = limit_to_single_tool_call(tag)
    _limit_whitespace(tag)
    return StructuredOutputsParams(structural_tag=tag.model_dump_json())


def structural_tag_model(parser_name: str) -> str | None:
    """The xgrammar structural-tag model of a tool parser's call format (None: has none)."""
    from vllm.tool_parsers import ToolParserManager

    try:
        parser_class = ToolParserManager.get_tool_parser(parser_name)
    except KeyError:
        raise EngineRequestError(f"Unknown tool-call parser `{parser_name}`.") from None
    return getattr(parser_class, "structural_tag_model", None)


def _tightened(tool: dict[str, Any], budget: int | None) -> dict[str, Any]:
    function = dict(tool["function"])
    function["parameters"] = fit_to_budget(function.get("parameters") or {"type": "object"}, budget)
    return {"type": "function", "function": function}


def _limit_whitespace(tag: Any) -> None:
    """At most one whitespace character in a row inside arguments, in place: free
    indentation is where small models spend their budget."""
    from pydantic import BaseModel
    from xgrammar.structural_tag import JSONSchemaFormat

    def visit(node: Any) -> None:
        if isinstance(node, JSONSchemaFormat):
            node.max_whitespace_cnt = 1
        if isinstance(node, BaseModel):
            for name in type(node).model_fields:
                visit(getattr(node, name))
        elif isinstance(node, (list, tuple)):
            for item in node:
                visit(item)

    visit(tag)


def forced_name(tool_choice: str | dict[str, Any]) -> str | None:
    """The function a named `tool_choice` pins the call to (None for the other modes)."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


class ToolCallStream:
    """Parses one choice's growing text into content and tool-call deltas."""

    def __init__(self, parser_name: str, request: ToolRequest, tokenizer: Any) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        self._vllm_request = ChatCompletionRequest.model_validate(
            {
                "model": "lilac",
                "messages": [{"role": "user", "content": ""}],
                "tools": request.tools,
                "tool_choice": request.tool_choice,
            }
        )
        parser_class = ToolParserManager.get_tool_parser(parser_name)
        if parser_name == "hermes":
            from engine.vllm_backend.hermes import JsonAwareHermesParser

            parser_class = JsonAwareHermesParser  # a call ends where its JSON closes
        # A list is invariant in mypy's eyes; vLLM only reads it.
        self._parser = parser_class(tokenizer, self._vllm_request.tools)  # type: ignore[arg-type]  # see above
        self._text = ""
        self._token_ids: list[int] = []
        self._sent_args: dict[int, str] = {}
        self._ids: dict[int, str] = {}
        # Kimi's ids name the function (`functions.NAME:IDX`): its template replays them
        # and its parser reads the name back, so they are kept as the model wrote them.
        self._kimi_ids = parser_name == "kimi_k2"
        self.called = False
        # A named `tool_choice` pins the one call to that function: its id and name can
        # go out with the first output token instead of after the model has written the
        # envelope up to the name (`<tool_call>\n{"name": "get_weather",`: 14 tokens on
        # SmolLM2), which is when the parser would find them.
        self._forced_name = forced_name(request.tool_choice)

    def feed(self, text: str, token_ids: list[int]) -> tuple[str, list[ToolCallDelta]]:
        content, deltas = self._parse(text, token_ids)
        if self._forced_name is not None and 0 not in self._ids:
            self.called = True
            self._ids[0] = self._new_id(0, None, self._forced_name)
            deltas.insert(0, ToolCallDelta(0, self._ids[0], self._forced_name, ""))
        return content, deltas

    def _parse(self, text: str, token_ids: list[int]) -> tuple[str, list[ToolCallDelta]]:
        previous_text, previous_ids = self._text, list(self._token_ids)
        self._text += text
        self._token_ids.extend(token_ids)
        message = self._parser.extract_tool_calls_streaming(
            previous_text,
            self._text,
            text,
            previous_ids,
            self._token_ids,
            token_ids,
            self._vllm_request,
        )
        if message is None:
            return "", []
        return message.content or "", [self._delta(call) for call in message.tool_calls or []]

    def _delta(self, call: Any) -> ToolCallDelta:
        self.called = True
        index = call.index
        function = call.function
        call_id = None
        if index not in self._ids:
            self._ids[index] = self._new_id(index, call.id, function.name if function else None)
            call_id = self._ids[index]
        arguments = (function.arguments if function else None) or ""
        self._sent_args[index] = self._sent_args.get(index, "") + arguments
        name = function.name if function else None
        if index == 0 and self._forced_name is not None:
            name = None  # sent with the first token
        return ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments)

    def _new_id(self, index: int, parsed_id: str | None, name: str | None) -> str:
        if not self._kimi_ids:
            return f"call_{uuid.uuid4().hex[:24]}"
        if parsed_id and KIMI_CALL_ID.fullmatch(parsed_id):
            return parsed_id
        return f"functions.{name or 'unknown'}:{index}"

    def finish(self) -> list[ToolCallDelta]:
        """Whatever the streaming parser held back, judged against a parse of the whole text."""
        info = self._parser.extract_tool_calls(self._text, self._vllm_request)
        if not info.tools_called:
            return []
        self.called = True
        deltas = []
        for index, call in enumerate(info.tool_calls):
            full = call.function.arguments
            sent = self._sent_args.get(index, "")
            if index not in self._ids:
                self._ids[index] = self._new_id(index, call.id, call.function.name)
                deltas.append(ToolCallDelta(index, self._ids[index], call.function.name, full))
            elif full.startswith(sent) and len(full) > len(sent):
                deltas.append(ToolCallDelta(index, None, None, full[len(sent) :]))
        return deltas
