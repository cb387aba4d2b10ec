"""Request bodies and objects shared by the micro-benchmarks (built once, at import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
SMOLLM2_TEMPLATE = (HERE / "smollm2_chat_template.jinja").read_text()
MODEL = "scripted"

_SENTENCE = "The quick brown fox jumps over the lazy dog while the cat watches from the fence. "


def plain_request() -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "temperature": 0.7,
        "max_tokens": 64,
    }


def long_history_request(turns: int = 50) -> dict[str, Any]:
    """A conversation of `turns` user/assistant pairs (about 100 KB of text)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: " + _SENTENCE * 12})
        messages.append({"role": "assistant", "content": f"Answer {turn}: " + _SENTENCE * 12})
    messages.append({"role": "user", "content": "And finally?"})
    return {"model": MODEL, "messages": messages, "max_tokens": 64}


def tools_request(count: int = 8) -> dict[str, Any]:
    """A plain request with `count` function tools (strict, with JSON-schema parameters)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool number {i}: looks something up and returns JSON.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "what to look up"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "units": {"type": "string", "enum": ["metric", "imperial"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        }
        for i in range(count)
    ]
    return {**plain_request(), "tools": tools, "tool_choice": "auto"}


def encode(body: dict[str, Any]) -> bytes:
    return msgspec.json.encode(body)


def template_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m["content"]} for m in request["messages"]]
