"""response_format, structured_outputs and tools -> xgrammar constraints (through
vLLM's structured outputs).

Every schema is bounded first (`engine.schema_bounds`), to fit the request's
output budget: a grammar alone does not make a small model's output valid.
"""

from __future__ import annotations

import json
from typing import Any

from engine.errors import EngineRequestError
from engine.protocol import GenerateRequest, StructuredOutput
from engine.schema_bounds import check_schema, fit_to_budget
from engine.tool_use import calls_tools

# Tokens a tool call's envelope takes besides its arguments (`<tool_call>`, the name...).
TOOL_CALL_ENVELOPE_TOKENS = 32


def json_schema_constraint(schema: dict[str, Any] | None, budget_tokens: int | None) -> Any:
    """StructuredOutputsParams for response_format json_schema (None: json_object)."""
    from vllm.sampling_params import StructuredOutputsParams

    target = fit_to_budget({"type": "object"} if schema is None else schema, budget_tokens)
    # The engine is built with disable_any_whitespace: no free whitespace in the JSON.
    return StructuredOutputsParams(json=json.dumps(target))


def constraint_for(
    request: GenerateRequest, tool_parser: str, budget_tokens: int | None = None
) -> Any:
    """The structured-output constraint of a request, or None when its output is free.
    `budget_tokens`: the most tokens the output may take (its `max_tokens`)."""
    from engine.vllm_backend.tool_calls import ToolRequest, structural_tag

    tool_call = calls_tools(request.tools, request.tool_choice)
    constraint = request.response_format
    if tool_call and constraint is not None:
        raise EngineRequestError(
            f"`{constraint.param}` cannot be combined with tool calls; set `tool_choice` to "
            f'"none" or drop `{constraint.param}`.',
            param=constraint.param,
        )
    if tool_call:
        tool_request = ToolRequest(
            request.tools or [], request.tool_choice, request.parallel_tool_calls
        )
        arguments_budget = None
        if budget_tokens is not None:
            arguments_budget = max(16, budget_tokens - TOOL_CALL_ENVELOPE_TOKENS)
        return structural_tag(tool_request, tool_parser, arguments_budget)
    if constraint is None:
        return None
    other = other_constraint(constraint)
    if other is not None:
        return other
    schema = constraint.schema
    if schema is not None:
        in_format = constraint.param == "response_format"
        check_schema(
            schema, "response_format.json_schema.schema" if in_format else constraint.param
        )
    return json_schema_constraint(schema, budget_tokens)


def other_constraint(constraint: StructuredOutput) -> Any:
    """StructuredOutputsParams for a choice, regex, grammar or structural tag (None when
    the constraint is JSON). xgrammar compiles them when vLLM admits the request; an
    invalid one is a 400 naming `constraint.param`."""
    from vllm.sampling_params import StructuredOutputsParams

    if constraint.choice is not None:
        return StructuredOutputsParams(choice=list(constraint.choice))
    if constraint.regex is not None:
        _parses(constraint, "from_regex", constraint.regex)
        return StructuredOutputsParams(regex=constraint.regex)
    if constraint.grammar is not None:
        _parses(constraint, "from_ebnf", constraint.grammar)
        return StructuredOutputsParams(grammar=constraint.grammar)
    if constraint.structural_tag is not None:
        from vllm.entrypoints.generate.base.protocol import (
            validate_structured_outputs_structural_tag,
        )

        params = StructuredOutputsParams(structural_tag=constraint.structural_tag)
        try:
            validate_structured_outputs_structural_tag(params)
        except Exception as exc:  # vLLM's and pydantic's errors alike: a bad tag
            raise EngineRequestError(
                f"Invalid structural tag: {exc}", param=constraint.param
            ) from exc
        return params
    return None


def _parses(constraint: StructuredOutput, parser: str, source: str) -> None:
    """Parse a regex or grammar with xgrammar before it reaches the engine core, where a
    parse failure would fail the request as an engine error."""
    import xgrammar

    try:
        getattr(xgrammar.Grammar, parser)(source)
    except Exception as exc:  # xgrammar raises RuntimeError (or ValueError) on bad input
        raise EngineRequestError(
            f"`{constraint.param}` is not valid: {exc}", param=constraint.param
        ) from exc
