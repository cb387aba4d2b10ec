"""Each family end to end: the real vLLM engine and the app, SmolLM2's weights bound to the
family's template and parser, the output forced into the family's reasoning format (the
package's `family_engine`, tests/integration/family_engine.py, shared with the
warm-models tests). Everything but the forcing (template, toggles, parsers, leak guard,
HTTP) is the server's real path.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.client import app_client, stream_events
from tests.integration.family_engine import FAMILY_MAX_MODEL_LEN, ForcedOutputEngine
from tests.integration.family_engine import FAMILY_MODEL as MODEL

URL = "/v1/chat/completions"
USER = [{"role": "user", "content": "Say hello."}]
WORDS = "[a-z]{2,8}( [a-z]{2,8}){1,3}"


def between(start: str, end: str) -> str:
    """Regex: reasoning words between the markers, then answer words."""
    return f"{re.escape(start)}{WORDS}{re.escape(end)}{WORDS}"


def closed(end: str) -> str:
    """Regex: the prompt opened reasoning; words, the end marker, answer words."""
    return f"{WORDS}{re.escape(end)}{WORDS}"


@pytest.fixture(scope="module")
async def family_client(family_engine: ForcedOutputEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(family_engine, timeout=120) as c:
        yield c


def bind(engine: ForcedOutputEngine, name: str, regex: str | None) -> None:
    engine.bind(name, regex)


async def chat(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": USER, "max_tokens": 40, "temperature": 0, **fields}
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def chat_stream(client: httpx.AsyncClient, **fields: Any) -> tuple[str, str, list[dict]]:
    body = {"model": MODEL, "messages": USER, "max_tokens": 40, "temperature": 0, "stream": True}
    response = await client.post(URL, json={**body, **fields})
    assert response.status_code == 200, response.text
    chunks = stream_events(response)  # ends in data: [DONE]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    reasoning = "".join(d.get("reasoning", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    return reasoning, content, chunks


async def split_both_ways(client: httpx.AsyncClient, **fields: Any) -> tuple[str, str]:
    """(reasoning, content) of the plain response, checked equal to the streamed one."""
    plain = await chat(client, **fields)
    message = plain["choices"][0]["message"]
    reasoning, content, _ = await chat_stream(client, **fields)
    assert (message.get("reasoning", ""), message["content"]) == (reasoning, content)
    return reasoning, content


def assert_split(reasoning: str, content: str, markers: tuple[str, ...]) -> None:
    """Both parts present, no marker left in either, each a run of the forced words."""
    assert reasoning and content
    for marker in markers:
        assert marker not in reasoning and marker not in content
    assert re.fullmatch(WORDS, reasoning.strip()) and re.fullmatch(WORDS, content.strip())


# ------------------------------------------------------------------ Kimi K2.6


async def test_kimi_thinks_by_default(family_client, family_engine) -> None:
    bind(family_engine, "kimi_k2", closed("</think>"))
    reasoning, content = await split_both_ways(family_client)
    assert family_engine.last_prompt.endswith("<|im_assistant|>assistant<|im_middle|><think>")
    assert_split(reasoning, content, ("<think>", "</think>"))


@pytest.mark.parametrize(
    "fields",
    [
        {"chat_template_kwargs": {"thinking": False}},
        {"thinking": False, "enable_thinking": False},  # the forward-compatible form
    ],
)
async def test_kimi_thinking_off(family_client, family_engine, fields) -> None:
    bind(family_engine, "kimi_k2", WORDS)
    reasoning, content = await split_both_ways(family_client, **fields)
    assert family_engine.last_prompt.endswith("<|im_middle|><think></think>")
    assert reasoning == "" and re.fullmatch(WORDS, content)


KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def test_kimi_tool_call_ids_round_trip(family_client, family_engine) -> None:
    # The model writes Kimi's id; the response keeps it, and the next turn replays it.
    bind(family_engine, "kimi_k2", re.escape(KIMI_CALL))
    # The markers are spelled out in this test checkpoint: many tokens, not 5.
    fields = {"tools": [WEATHER_TOOL], "thinking": False, "max_tokens": 400}
    plain = await chat(family_client, **fields)
    choice = plain["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "functions.get_weather:0" and call["function"]["name"] == "get_weather"
    assert "namespace functions {\ntype get_weather = (_: {" in family_engine.last_prompt
    _, _, chunks = await chat_stream(family_client, **fields)
    streamed = [
        tool_call["id"]
        for chunk in chunks
        for tool_call in chunk["choices"][0]["delta"].get("tool_calls") or []
        if tool_call.get("id")
    ]
    assert streamed == ["functions.get_weather:0"]

    bind(family_engine, "kimi_k2", WORDS)
    history = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": choice["message"]["tool_calls"]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    await chat(family_client, messages=history, tools=[WEATHER_TOOL], max_tokens=4)
    prompt = family_engine.last_prompt
    assert "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" in prompt
    assert "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\nsunny" in prompt


# ------------------------------------------------------------------ GLM 5.2


async def test_glm_thinks_by_default_with_high_effort(family_client, family_engine) -> None:
    bind(family_engine, "glm45", closed("</think>"))
    reasoning, content = await split_both_ways(family_client)
    assert family_engine.last_prompt.startswith("[gMASK]<sop><|system|>Reasoning Effort: High")
    assert family_engine.last_prompt.endswith("<|assistant|><think>")
    assert_split(reasoning, content, ("<think>", "</think>"))


async def test_glm_reasoning_effort_max_in_either_place(family_client, family_engine) -> None:
    bind(family_engine, "glm45", closed("</think>"))
    for fields in (
        {"reasoning_effort": "max"},
        {"chat_template_kwargs": {"reasoning_effort": "max"}},
    ):
        reasoning, content = await split_both_ways(family_client, **fields)
        assert "Reasoning Effort: Max" in family_engine.last_prompt
        assert_split(reasoning, content, ("</think>",))


async def test_glm_thinking_off_drops_leaked_reasoning(family_client, family_engine) -> None:
    # Thinking off, yet the model thinks and closes with a bare </think>: the leak goes.
    bind(family_engine, "glm45", closed("</think>"))
    plain = await chat(family_client, chat_template_kwargs={"enable_thinking": False})
    raw = plain["choices"][0]["message"]
    reasoning, content, _ = await chat_stream(
        family_client, chat_template_kwargs={"enable_thinking": False}
    )
    prompt = family_engine.last_prompt
    assert prompt.endswith("<|assistant|><think></think>") and "Reasoning Effort" not in prompt
    assert "reasoning" not in raw and reasoning == ""
    assert content == raw["content"] and re.fullmatch(WORDS, content)


async def test_glm_thinking_off_without_leak_keeps_everything(family_client, family_engine) -> None:
    bind(family_engine, "glm45", WORDS)
    reasoning, content = await split_both_ways(family_client, enable_thinking=False)
    assert reasoning == "" and re.fullmatch(WORDS, content)


# ------------------------------------------------------------------ Gemma 4


async def test_gemma_does_not_think_by_default(family_client, family_engine) -> None:
    bind(family_engine, "gemma4", WORDS)
    reasoning, content = await split_both_ways(family_client)
    assert "<|think|>" not in family_engine.last_prompt
    # Thinking off: the prompt prefills an empty thought channel, as Gemma's template does.
    assert family_engine.last_prompt.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    assert reasoning == "" and re.fullmatch(WORDS, content)


async def test_gemma_thinking_on(family_client, family_engine) -> None:
    bind(family_engine, "gemma4", between("<|channel>thought\n", "<channel|>"))
    reasoning, content = await split_both_ways(
        family_client, chat_template_kwargs={"enable_thinking": True}
    )
    assert "<|turn>system\n<|think|>\n<turn|>" in family_engine.last_prompt
    assert_split(reasoning, content, ("<|channel>", "<channel|>", "thought"))


async def test_gemma_end_of_turn_stops_generation(family_client, family_engine) -> None:
    # The checkpoint's generation config does not list <turn|>: the family's turn ends do.
    bind(family_engine, "gemma4", f"{WORDS}{re.escape('<turn|>')}{WORDS}")
    plain = await chat(family_client)
    choice = plain["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert re.fullmatch(WORDS, choice["message"]["content"])


# ------------------------------------------------------------------ MiniMax M3


async def test_minimax_adaptive_by_default(family_client, family_engine) -> None:
    bind(family_engine, "minimax_m3", between("<mm:think>", "</mm:think>"))
    reasoning, content = await split_both_ways(family_client)
    assert family_engine.last_prompt.endswith("]~b]ai\n")
    assert "Current thinking mode: adaptive." in family_engine.last_prompt
    assert_split(reasoning, content, ("<mm:think>", "</mm:think>"))


async def test_minimax_enabled(family_client, family_engine) -> None:
    bind(family_engine, "minimax_m3", closed("</mm:think>"))
    fields = {"chat_template_kwargs": {"thinking_mode": "enabled"}}
    reasoning, content = await split_both_ways(family_client, **fields)
    assert family_engine.last_prompt.endswith("]~b]ai\n<mm:think>")
    assert_split(reasoning, content, ("<mm:think>", "</mm:think>"))


async def test_minimax_disabled(family_client, family_engine) -> None:
    bind(family_engine, "minimax_m3", WORDS)
    fields = {"chat_template_kwargs": {"thinking_mode": "disabled"}}
    reasoning, content = await split_both_ways(family_client, **fields)
    assert family_engine.last_prompt.endswith("]~b]ai\n</mm:think>")
    assert "Current thinking mode: disabled." in family_engine.last_prompt
    assert reasoning == "" and re.fullmatch(WORDS, content)


# ------------------------------------------------------------------ across families


async def test_smollm2_has_no_reasoning(family_client, family_engine) -> None:
    bind(family_engine, "smollm2", None)
    plain = await chat(family_client, max_tokens=8, thinking=True)
    assert "reasoning" not in plain["choices"][0]["message"]
    assert family_engine.last_prompt.endswith("<|im_start|>assistant\n")


async def test_reasoning_counts_in_completion_tokens(family_client, family_engine) -> None:
    # max_completion_tokens bounds reasoning plus answer: cut inside the reasoning.
    bind(family_engine, "kimi_k2", closed("</think>"))
    plain = await chat(family_client, max_completion_tokens=3)
    choice = plain["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["reasoning"] and choice["message"]["content"] == ""
    assert plain["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("family", "fields", "param"),
    [
        ("kimi_k2", {"chat_template_kwargs": {"thinking": "no"}}, "chat_template_kwargs.thinking"),
        ("kimi_k2", {"thinking": "no"}, "thinking"),
        # Every OpenAI level is a GLM effort ("low" means "high"): only an unknown one is bad.
        ("glm45", {"reasoning_effort": "ultra"}, "reasoning_effort"),
        (
            "glm45",
            {"chat_template_kwargs": {"reasoning_effort": 3}},
            "chat_template_kwargs.reasoning_effort",
        ),
        ("gemma4", {"enable_thinking": 1}, "enable_thinking"),
        (
            "minimax_m3",
            {"chat_template_kwargs": {"thinking_mode": "on"}},
            "chat_template_kwargs.thinking_mode",
        ),
    ],
)
async def test_bad_toggle_values_are_400(
    family_client, family_engine, family, fields, param
) -> None:
    bind(family_engine, family, None)
    for stream in (False, True):
        body = {"model": MODEL, "messages": USER, "max_tokens": 4, "stream": stream, **fields}
        response = await family_client.post(URL, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param


async def test_models_show_family(family_client, family_engine) -> None:
    for name, reasons in (("glm45", True), ("gemma4", False), ("smollm2", False)):
        bind(family_engine, name, None)
        card = (await family_client.get("/v1/models")).json()["data"][0]
        assert (card["family"], card["reasons_by_default"]) == (name, reasons)
        assert card["max_model_len"] == FAMILY_MAX_MODEL_LEN
