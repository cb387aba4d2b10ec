"""The hermes tool-call format (SmolLM2, Qwen-style templates): parsing, streaming at
every split, and the grammar built from the tools."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from engine.checkpoint import default_model_dir
from engine.vllm_backend.tool_calls import ToolCallStream, ToolRequest, structural_tag

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
REQUEST = ToolRequest(TOOLS, "auto")
TEXT = (
    'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    "\n</tool_call>"
)


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(default_model_dir())


def run(tokenizer, pieces: list[str]) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    stream = ToolCallStream("hermes", REQUEST, tokenizer)
    content, calls = "", {}
    deltas = []
    for piece in pieces:
        text, new = stream.feed(piece, tokenizer.encode(piece, add_special_tokens=False))
        content += text
        deltas.extend(new)
    deltas.extend(stream.finish())
    for delta in deltas:
        call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
        if delta.id:
            assert call["id"] is None
            call["id"] = delta.id
        if delta.name:
            call["name"] = delta.name
        call["arguments"] += delta.arguments
    return content, calls


def test_whole_text(tokenizer) -> None:  # type: ignore[no-untyped-def]
    content, calls = run(tokenizer, [TEXT])
    assert content == "Let me check."
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("split", range(1, len(TEXT), 7))
def test_streaming_at_every_split_gives_the_same_call(tokenizer, split: int) -> None:  # type: ignore[no-untyped-def]
    pieces = [TEXT[i : i + split] for i in range(0, len(TEXT), split)]
    content, calls = run(tokenizer, pieces)
    assert content == "Let me check."
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_plain_text_is_content(tokenizer) -> None:  # type: ignore[no-untyped-def]
    content, calls = run(tokenizer, ["Just ", "text."])
    assert content == "Just text." and calls == {}


def test_structural_tag_constrains_arguments_in_auto_mode() -> None:
    params = structural_tag(REQUEST, "hermes")
    tag = json.loads(params.structural_tag)
    text = json.dumps(tag)
    assert "<tool_call>" in text and "get_weather" in text
    assert '"maxLength": 200' in text  # the tightened argument schema


def test_single_call_when_parallel_is_off() -> None:
    params = structural_tag(ToolRequest(TOOLS, "required", parallel_tool_calls=False), "hermes")
    assert json.loads(params.structural_tag)["format"]["stop_after_first"] is True


def test_structural_tag_models_come_from_vllm_parsers() -> None:
    from engine.errors import EngineRequestError
    from engine.vllm_backend.tool_calls import structural_tag_model

    assert structural_tag_model("hermes") == "hermes"
    assert structural_tag_model("kimi_k2") == "kimi"
    assert structural_tag_model("glm47") == "glm_4_7"
    with pytest.raises(EngineRequestError, match="Unknown tool-call parser"):
        structural_tag_model("nope")


def test_format_without_structural_tag_is_free_in_auto_and_400_when_forced() -> None:
    from engine.errors import EngineRequestError

    assert structural_tag(ToolRequest(TOOLS, "auto"), "gemma4") is None
    with pytest.raises(EngineRequestError) as caught:
        structural_tag(ToolRequest(TOOLS, "required"), "gemma4")
    assert caught.value.param == "tool_choice"


def test_arguments_allow_at_most_one_whitespace_in_a_row() -> None:
    tag = json.loads(structural_tag(REQUEST, "hermes").structural_tag)
    counts = []

    def visit(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "json_schema":
                counts.append(node.get("max_whitespace_cnt"))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(tag)
    assert counts and set(counts) == {1}


def test_arguments_fit_the_budget() -> None:
    tag = structural_tag(REQUEST, "hermes", arguments_budget=60).structural_tag
    assert '"maxLength":200' not in tag and '"maxLength":' in tag


MARKER_IN_STRING = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "}}</tool_call> Paris"}}'
    "\n</tool_call>"
)


@pytest.mark.parametrize("split", [1, 3, 7, len(MARKER_IN_STRING)])
def test_end_marker_inside_a_string_does_not_end_the_call(tokenizer, split: int) -> None:  # type: ignore[no-untyped-def]
    pieces = [MARKER_IN_STRING[i : i + split] for i in range(0, len(MARKER_IN_STRING), split)]
    content, calls = run(tokenizer, pieces)
    assert content == ""
    assert list(calls) == [0]
    assert json.loads(calls[0]["arguments"]) == {"city": "}}</tool_call> Paris"}


def test_json_object_end() -> None:
    from engine.vllm_backend.hermes import json_object_end

    text = 'x {"a": "}\\"{", "b": {"c": 1}} tail'
    assert text[: json_object_end(text, 0)] == 'x {"a": "}\\"{", "b": {"c": 1}}'
    assert json_object_end('{"a": "open', 0) is None


KIMI_TEXT = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:3"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)


def run_parser(tokenizer, parser: str, pieces: list[str]) -> dict:  # type: ignore[no-untyped-def]
    stream = ToolCallStream(parser, REQUEST, tokenizer)
    deltas = []
    for piece in pieces:
        deltas.extend(stream.feed(piece, tokenizer.encode(piece, add_special_tokens=False))[1])
    deltas.extend(stream.finish())
    return {d.index: d.id for d in deltas if d.id}


@pytest.mark.parametrize("split", [None, 40, 75])
def test_kimi_keeps_the_models_own_call_ids(tokenizer, split: int | None) -> None:  # type: ignore[no-untyped-def]
    pieces = [KIMI_TEXT] if split is None else [KIMI_TEXT[:split], KIMI_TEXT[split:]]
    assert run_parser(tokenizer, "kimi_k2", pieces) == {0: "functions.get_weather:3"}


def test_other_formats_mint_openai_ids(tokenizer) -> None:  # type: ignore[no-untyped-def]
    (call_id,) = run_parser(tokenizer, "hermes", [TEXT]).values()
    assert call_id.startswith("call_") and len(call_id) == 29


def test_a_named_tool_choice_sends_its_call_header_with_the_first_token(tokenizer) -> None:  # type: ignore[no-untyped-def]
    named = ToolRequest(TOOLS, {"type": "function", "function": {"name": "get_weather"}})
    stream = ToolCallStream("hermes", named, tokenizer)
    text = TEXT.removeprefix("Let me check.")
    ids = tokenizer.encode(text, add_special_tokens=False)
    deltas = []
    for position, token in enumerate(ids):
        content, new = stream.feed(tokenizer.decode([token]), [token])
        assert content == ""
        if position == 0:
            assert [(d.index, d.name, d.arguments) for d in new] == [(0, "get_weather", "")]
            assert new[0].id is not None and new[0].id.startswith("call_")
        deltas.extend(new)
    deltas.extend(stream.finish())
    assert [d.name for d in deltas if d.name] == ["get_weather"]  # the name once
    assert [d.id for d in deltas if d.id] == [deltas[0].id]  # one id
    assert json.loads("".join(d.arguments for d in deltas)) == {"city": "Paris"}
