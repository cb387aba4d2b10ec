"""Each family's template renders the same text as its published template, token for token.

The conversations go through the server's own path (wire request -> `messages_for_template`
and `tool_fields`, the family's toggles through `resolve`, its tokenizer-side context such
as Kimi's `tools_ts_str`), then through both templates. The published templates and their
sources are in tests/fixtures/published_templates/ (README.md there).
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from app.schemas.chat import ChatCompletionRequest
from app.services.chat.service import messages_for_template
from app.services.generation.tools import tool_fields
from engine.families import get, resolve
from engine.templates import load_template_file, render_chat
from tests.fixtures.published_templates.reconstructions import reference

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather.\nUse it for today only.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name", "minLength": 1},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "when": {"type": "object", "properties": {"hour": {"type": "integer"}}},
                "tags": {"type": "array", "items": {"type": "string"}, "x-extra": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


def call(index: int, name: str, arguments: str) -> dict[str, Any]:
    call_id = f"functions.{name}:{index}"
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SYSTEM = {"role": "system", "content": "Be brief."}
HI = {"role": "user", "content": "Weather in Paris?"}
ONE_CALL = {
    "role": "assistant",
    "content": None,
    "reasoning": "I should call the tool.",
    "tool_calls": [call(0, "get_weather", '{"city": "Paris", "days": 2, "when": {"hour": 9}}')],
}
TWO_CALLS = {
    "role": "assistant",
    "content": "Checking both.",
    "reasoning": "Two lookups at once.",
    "tool_calls": [
        call(1, "get_weather", '{"city": "Oslo", "tags": ["a", "b"]}'),
        call(2, "search", '{"q": "Oslo news"}'),
    ],
}
RESULT_0 = {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny, 21C"}
RESULT_1 = {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "rain"}
RESULT_2 = {"role": "tool", "tool_call_id": "functions.search:2", "content": "nothing new"}
ANSWER = {"role": "assistant", "content": "Sunny, 21C.", "reasoning": "Report it."}
PLAIN_ANSWER = {"role": "assistant", "content": "Hello there."}
AGAIN = {"role": "user", "content": "And Oslo?"}

CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "plain": ([HI], None),
    "system": ([SYSTEM, HI], None),
    "multi_turn": ([SYSTEM, HI, PLAIN_ANSWER, AGAIN], None),
    "past_reasoning": ([HI, ANSWER, AGAIN], None),
    "tools_declared": ([SYSTEM, HI], [WEATHER, SEARCH]),
    "tool_call_pending": ([HI, ONE_CALL, RESULT_0], [WEATHER]),
    "tool_round_done": ([SYSTEM, HI, ONE_CALL, RESULT_0, ANSWER, AGAIN], [WEATHER, SEARCH]),
    "parallel_calls": ([HI, ANSWER, AGAIN, TWO_CALLS, RESULT_1, RESULT_2], [WEATHER, SEARCH]),
    "agent_loop": (
        [HI, ONE_CALL, RESULT_0, ANSWER, TWO_CALLS, RESULT_1, RESULT_2],
        [WEATHER, SEARCH],
    ),
}

# Every value of every toggle, plus template kwargs the published templates read.
SETTINGS: dict[str, list[dict[str, Any]]] = {
    "kimi_k2": [{"thinking": True}, {"thinking": False}, {"preserve_thinking": True}],
    "glm45": [
        {"enable_thinking": True, "reasoning_effort": "high"},
        {"enable_thinking": True, "reasoning_effort": "max"},
        {"enable_thinking": False},
        {"clear_thinking": False},
    ],
    "gemma4": [{"enable_thinking": True}, {"enable_thinking": False}],
    "minimax_m3": [{"thinking_mode": mode} for mode in ("adaptive", "enabled", "disabled")],
}
SPECIAL_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>"}


def engine_inputs(
    family_name: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What the engine hands a template for this request, built the way the server does."""
    body: dict[str, Any] = {"model": "m", "messages": messages, "chat_template_kwargs": kwargs}
    if tools:
        body["tools"] = tools
    request = msgspec.convert(body, ChatCompletionRequest)
    family = get(family_name)
    variables, _ = resolve(family, kwargs, {})
    engine_tools = tool_fields(request).get("tools")
    if engine_tools:
        variables["tools"] = engine_tools
        if family.template_context is not None:
            variables.update(family.template_context(engine_tools))
    return messages_for_template(request.messages), variables


CASES = [
    (family, conversation, kwargs)
    for family, conversation in itertools.product(SETTINGS, CONVERSATIONS)
    for kwargs in SETTINGS[family]
]


@pytest.mark.parametrize(("family_name", "conversation", "kwargs"), CASES)
def test_ours_renders_the_published_text(
    family_name: str, conversation: str, kwargs: dict[str, Any]
) -> None:
    messages, tools = CONVERSATIONS[conversation]
    rendered_messages, variables = engine_inputs(family_name, messages, tools, kwargs)
    ours_source = load_template_file(get(family_name).template)
    for add_generation_prompt in (True, False):
        common = {
            "add_generation_prompt": add_generation_prompt,
            "special_tokens": SPECIAL_TOKENS,
            "template_kwargs": variables,
        }
        ours = render_chat(ours_source, rendered_messages, **common)
        published = render_chat(reference(family_name), rendered_messages, **common)
        assert ours == published
