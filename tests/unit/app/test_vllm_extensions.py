"""vLLM's request extensions over a scripted engine: what reaches the engine, and the
400 (naming the field) for bad values, refused extensions and refused combinations."""

from __future__ import annotations

import httpx
import pytest

from engine.protocol import StructuredOutput
from engine.scripted import ScriptedEngine

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


async def _constraint(
    client: httpx.AsyncClient, engine: ScriptedEngine, fields: dict
) -> StructuredOutput | None:
    body = {"model": "scripted", "messages": MESSAGES, "max_tokens": 1, **fields}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    return engine.requests[-1].response_format


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"structured_outputs": {"choice": ["yes", "no"]}},
            StructuredOutput(choice=["yes", "no"], param="structured_outputs.choice"),
        ),
        (
            {"structured_outputs": {"regex": "[0-9]+"}},
            StructuredOutput(regex="[0-9]+", param="structured_outputs.regex"),
        ),
        (
            {"structured_outputs": {"grammar": 'root ::= "a"'}},
            StructuredOutput(grammar='root ::= "a"', param="structured_outputs.grammar"),
        ),
        (
            {"structured_outputs": {"json": {"type": "object"}}},
            StructuredOutput(schema={"type": "object"}, param="structured_outputs.json"),
        ),
        (
            {"structured_outputs": {"json": '{"type": "integer"}'}},
            StructuredOutput(schema={"type": "integer"}, param="structured_outputs.json"),
        ),
        (
            {"structured_outputs": {"json_object": True}},
            StructuredOutput(param="structured_outputs.json_object"),
        ),
        (
            {"structured_outputs": {"structural_tag": {"type": "structural_tag"}}},
            StructuredOutput(
                structural_tag='{"type": "structural_tag"}',
                param="structured_outputs.structural_tag",
            ),
        ),
        ({"guided_choice": ["a"]}, StructuredOutput(choice=["a"], param="guided_choice")),
        ({"guided_regex": "a+"}, StructuredOutput(regex="a+", param="guided_regex")),
        ({"guided_grammar": "g"}, StructuredOutput(grammar="g", param="guided_grammar")),
        (
            {"guided_json": {"type": "object"}, "guided_decoding_backend": "xgrammar"},
            StructuredOutput(schema={"type": "object"}, param="guided_json"),
        ),
        ({}, None),
    ],
)
async def test_constraints_reach_the_engine(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, fields: dict, expected: object
) -> None:
    assert await _constraint(client, scripted_engine, fields) == expected


async def test_completions_take_constraints_and_response_format(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    for fields, expected in [
        ({"guided_choice": ["a", "b"]}, StructuredOutput(choice=["a", "b"], param="guided_choice")),
        ({"response_format": {"type": "json_object"}}, StructuredOutput()),
    ]:
        body = {"model": "scripted", "prompt": "p", "max_tokens": 1, **fields}
        assert (await client.post(COMPLETIONS, json=body)).status_code == 200
        assert scripted_engine.requests[-1].response_format == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs"),
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"structured_outputs": {"regex": "a" * 5000}}, "structured_outputs.regex"),
        ({"structured_outputs": {"grammar": "a" * 70_000}}, "structured_outputs.grammar"),
        ({"structured_outputs": {"json": "{nope"}}, "structured_outputs.json"),
        ({"structured_outputs": {"json": {"type": "nope"}}}, "structured_outputs.json"),
        ({"structured_outputs": {"json_object": False}}, "structured_outputs.json_object"),
        (
            {"structured_outputs": {"regex": "a", "whitespace_pattern": " "}},
            "structured_outputs.whitespace_pattern",
        ),
        (
            {"structured_outputs": {"json_object": True, "disable_additional_properties": True}},
            "structured_outputs.disable_additional_properties",
        ),
        ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice"),
        (
            {"response_format": {"type": "json_object"}, "guided_choice": ["a"]},
            "guided_choice",
        ),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
            "structured_outputs.regex",
        ),
        ({"guided_whitespace_pattern": " "}, "guided_whitespace_pattern"),
        ({"reasoning_effort": "ultra"}, "reasoning_effort"),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"length_penalty": 2.0}, "length_penalty"),
        ({"chat_template": "{{ messages }}"}, "chat_template"),
        ({"include_reasoning": False}, "include_reasoning"),
        ({"spaces_between_special_tokens": False}, "spaces_between_special_tokens"),
        ({"truncation_side": "right"}, "truncation_side"),
        ({"vllm_xargs": {"a": 1}}, "vllm_xargs"),
        ({"thinking_token_budget": 10}, "thinking_token_budget"),
        (
            {"stream": True, "stream_options": {"continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats",
        ),
        ({"continue_final_message": True}, "continue_final_message"),
        ({"allowed_token_ids": [-1]}, "allowed_token_ids[0]"),
        ({"bad_words": [""]}, "bad_words[0]"),
        ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ],
)
async def test_bad_extensions_are_400s_naming_the_field(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, fields: dict, param: str
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, "max_tokens": 1, **fields}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert not scripted_engine.requests


@pytest.mark.parametrize(
    "fields",
    [
        {"use_beam_search": False, "length_penalty": 1.0, "spaces_between_special_tokens": True},
        {"truncation_side": "left", "include_reasoning": True, "prompt_logprobs": None},
        {"stream_interval": 2, "cache_salt": "s", "request_id": "r", "session_id": "x"},
        {"reasoning_effort": "low"},
        {"reasoning_effort": "max"},
    ],
)
async def test_defaults_of_refused_extensions_are_accepted(
    client: httpx.AsyncClient, fields: dict
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, "max_tokens": 1, **fields}
    assert (await client.post(CHAT, json=body)).status_code == 200


async def test_completions_refuse_suffix(client: httpx.AsyncClient) -> None:
    body = {"model": "scripted", "prompt": "p", "suffix": "end"}
    response = await client.post(COMPLETIONS, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "suffix"


async def test_prompt_extensions_reach_the_engine(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    body = {
        "model": "scripted",
        "prompt": "a b c",
        "max_tokens": 1,
        "allowed_token_ids": [1, 2],
        "bad_words": ["x y"],
        "truncate_prompt_tokens": 2,
        "add_special_tokens": False,
    }
    assert (await client.post(COMPLETIONS, json=body)).status_code == 200
    request = scripted_engine.requests[-1]
    assert request.sampling.allowed_token_ids == [1, 2]
    assert request.sampling.bad_words == ["x y"]
    assert request.truncate_prompt_tokens == 2
    assert request.add_special_tokens is False


async def test_chat_template_extensions_reach_the_engine(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    messages = [*MESSAGES, {"role": "assistant", "content": "The answer is"}]
    documents = [{"title": "t", "text": "d"}]
    body = {
        "model": "scripted",
        "messages": messages,
        "max_tokens": 2,
        "add_generation_prompt": False,
        "continue_final_message": True,
        "documents": documents,
        "echo": True,
    }
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200
    request = scripted_engine.requests[-1]
    assert (request.add_generation_prompt, request.continue_final_message) == (False, True)
    assert request.documents == documents
    # echo: the continued message comes first in the content.
    assert response.json()["choices"][0]["message"]["content"] == "The answer isHello,"


async def test_chat_echo_streams_the_last_message_first(client: httpx.AsyncClient) -> None:
    from tests.client import stream_events

    messages = [*MESSAGES, {"role": "assistant", "content": "Sure:"}]
    body = {
        "model": "scripted",
        "messages": messages,
        "max_tokens": 1,
        "echo": True,
        "add_generation_prompt": False,
        "continue_final_message": True,
        "stream": True,
    }
    events = stream_events(await client.post(CHAT, json=body))
    contents = [c["delta"].get("content") for e in events for c in e["choices"]]
    assert contents[0] == "Sure:Hello"


async def test_chat_echo_without_an_assistant_message_echoes_nothing(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, "max_tokens": 1, "echo": True}
    response = await client.post(CHAT, json=body)
    assert response.json()["choices"][0]["message"]["content"] == "Hello"


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1], [2, 3]], [[1], [2, 3]]),
    ],
)
async def test_token_id_prompts(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, prompt: list, expected: list
) -> None:
    body = {"model": "scripted", "prompt": prompt, "max_tokens": 1}
    response = await client.post(COMPLETIONS, json=body)
    assert response.status_code == 200
    sent = [r.prompt_token_ids for r in scripted_engine.requests]
    assert sent == expected
    assert [c["index"] for c in response.json()["choices"]] == list(range(len(expected)))


async def test_echoed_token_prompt_is_its_text(client: httpx.AsyncClient) -> None:
    body = {"model": "scripted", "prompt": [1, 2], "max_tokens": 1, "echo": True, "logprobs": 0}
    choice = (await client.post(COMPLETIONS, json=body)).json()["choices"][0]
    assert choice["text"] == "x xxHello"  # the scripted engine's detokenize
    assert "".join(choice["logprobs"]["tokens"]) == choice["text"]
    assert choice["logprobs"]["text_offset"] == [0, 1, 4]


@pytest.mark.parametrize(
    ("prompt", "param"),
    [
        ([1, "a"], "prompt"),
        ([[1], "a"], "prompt"),
        ([[]], "prompt[0]"),
        ([-1], "prompt[0]"),
        ([["a"]], "prompt[0][0]"),
        ([[1]] * 65, "prompt"),
        ([], "prompt"),
    ],
)
async def test_bad_prompts_are_400s(client: httpx.AsyncClient, prompt: list, param: str) -> None:
    body = {"model": "scripted", "prompt": prompt, "max_tokens": 1}
    response = await client.post(COMPLETIONS, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_token_ids_outside_the_vocabulary_are_400s() -> None:
    from dataclasses import replace

    from tests.client import app_client

    engine = ScriptedEngine()
    engine._model = replace(engine.model, vocab_size=100)
    async with app_client(engine) as http:
        body = {"model": "scripted", "prompt": [[1], [5, 100]], "max_tokens": 1}
        response = await http.post(COMPLETIONS, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "prompt[1]"
    assert not engine.requests
