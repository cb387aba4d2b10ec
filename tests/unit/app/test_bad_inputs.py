"""The bad-input matrix: every parameter's boundaries on both sides, over HTTP.

Each bad value gets a 400 `invalid_request_error` naming the parameter, and
nothing reaches the engine; each boundary value just inside the range is accepted.
"""

from __future__ import annotations

import httpx
import pytest

from engine.scripted import ScriptedEngine
from tests.client import app_client

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]

# (parameter, accepted values at the edges, rejected values just outside or of a wrong type)
CHAT_MATRIX: list[tuple[str, list[object], list[object]]] = [
    ("temperature", [0, 2], [-0.01, 2.01, "hot"]),
    ("top_p", [1e-9, 1], [0, 1.01, "x"]),
    ("top_k", [-1, 0, 1, 50], [-2, 1.5]),
    ("min_p", [0, 1], [-0.1, 1.1]),
    ("frequency_penalty", [-2, 2], [-2.1, 2.1, "a"]),
    ("presence_penalty", [-2, 2], [-2.01, 2.01]),
    ("repetition_penalty", [0.01, 10], [0, -1, 10.5]),
    ("max_tokens", [1, 100], [0, -1, 1.5, "9"]),
    ("max_completion_tokens", [1], [0, "1"]),
    ("n", [1, 4], [0, 129, 1.0]),
    ("stop", ["x", ["a", "b", "c", "d"]], ["", ["a"] * 5, 7, [1]]),
    ("seed", [0, -1, 2**63 - 1], [2**63, "s"]),
    ("logit_bias", [{"5": 100}, {"5": -100}], [{"5": 101}, {"x": 1}, {"-3": 1}, [1]]),
    ("logprobs", [True, False], ["yes", 1]),
    ("stream", [False], ["true", 0]),
    ("min_tokens", [0, 4], [-1, "2"]),
    ("stop_token_ids", [[1, 2]], [[-1], "1"]),
    ("ignore_eos", [True], ["no"]),
    ("messages", [MESSAGES], [[], "hi", [{"role": "user"}], [{"role": "x", "content": "a"}]]),
    ("model", ["scripted"], [5, None]),
]


def matrix_cases(kind: str) -> list[tuple[str, object]]:
    index = 1 if kind == "good" else 2
    return [(name, value) for name, *values in CHAT_MATRIX for value in values[index - 1]]


@pytest.mark.parametrize(("param", "value"), matrix_cases("bad"))
async def test_chat_rejects(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, param: str, value: object
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, param: value}
    if param == "top_logprobs":
        body["logprobs"] = True
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].split("[")[0].split(".")[0] == param
    assert scripted_engine.requests == []


@pytest.mark.parametrize(("param", "value"), matrix_cases("good"))
async def test_chat_accepts_boundaries(
    client: httpx.AsyncClient, param: str, value: object
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, param: value}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"top_logprobs": 3}, "top_logprobs"),  # without logprobs: true
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        (
            {
                "stream": True,
                "stream_options": {"include_usage": True},
                "min_tokens": 9,
                "max_tokens": 3,
            },
            "min_tokens",
        ),
        ({"max_tokens": 5000}, "max_tokens"),  # over the context
        ({"stream": True, "max_tokens": 5000}, "max_tokens"),  # a 400 before the stream
    ],
)
async def test_chat_inconsistent_combinations(
    client: httpx.AsyncClient, body: dict, param: str
) -> None:
    response = await client.post(CHAT, json={"model": "scripted", "messages": MESSAGES, **body})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["param"] == param


async def test_ignored_openai_fields_are_accepted(client: httpx.AsyncClient) -> None:
    body = {
        "model": "scripted",
        "messages": MESSAGES,
        "user": "u-1",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "parallel_tool_calls": True,
    }
    assert (await client.post(CHAT, json=body)).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": "x", "logprobs": 6}, "logprobs"),
        ({"prompt": "x", "logprobs": True}, "logprobs"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "echo": "yes"}, "echo"),
        ({"prompt": "x", "temperature": 3}, "temperature"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
async def test_completions_rejects(client: httpx.AsyncClient, body: dict, param: str) -> None:
    response = await client.post(COMPLETIONS, json={"model": "scripted", **body})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].split("[")[0] == param


async def test_tokenize_needs_exactly_one_input(client: httpx.AsyncClient) -> None:
    response = await client.post("/tokenize", json={"model": "scripted"})
    assert response.status_code == 400
    both = {"model": "scripted", "prompt": "a", "messages": MESSAGES}
    assert (await client.post("/tokenize", json=both)).status_code == 400
    unknown = await client.post("/tokenize", json={"model": "nope", "prompt": "a"})
    assert unknown.status_code == 404


# ---------------------------------------------------------------- bodies and bounds


def nested(depth: int) -> dict:
    """A JSON schema whose objects nest `depth` properties deep."""
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def wide(properties: int) -> dict:
    return {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(properties)},
    }


def tool(parameters: dict, name: str = "f") -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}


@pytest.mark.parametrize(
    ("url", "body"),
    [
        (CHAT, {"model": "scripted", "messages": MESSAGES}),
        (COMPLETIONS, {"model": "scripted", "prompt": "hi"}),
        ("/tokenize", {"model": "scripted", "prompt": "hi"}),
        ("/detokenize", {"model": "scripted", "tokens": [1]}),
    ],
)
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_post_bodies_must_be_declared_json(
    client: httpx.AsyncClient,
    scripted_engine: ScriptedEngine,
    url: str,
    body: dict,
    content_type: str | None,
) -> None:
    """A cross-site form post (no preflight) cannot drive the server: 415."""
    import json

    headers = {"content-type": content_type} if content_type else {}
    response = await client.post(url, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "unsupported_media_type")
    assert scripted_engine.requests == []
    charset = {"content-type": "application/json; charset=utf-8"}
    accepted = await client.post(url, content=json.dumps(body).encode(), headers=charset)
    assert accepted.status_code == 200, accepted.text


@pytest.mark.parametrize("url", [CHAT, COMPLETIONS, "/tokenize"])
async def test_deep_json_is_a_400_even_in_an_ignored_field(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, url: str
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    raw = b'{"model": "scripted", "prompt": "x", "messages": [], "ignored": ' + deep + b"}"
    response = await client.post(url, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "json_too_deep"
    assert scripted_engine.requests == []


async def test_json_just_within_the_depth_bound_is_accepted(client: httpx.AsyncClient) -> None:
    from app.transport.json_limits import MAX_BODY_DEPTH

    value: object = 1
    for _ in range(MAX_BODY_DEPTH - 1):  # the body's own object is one level
        value = [value]
    body = {"model": "scripted", "messages": MESSAGES, "metadata_extra": value}
    assert (await client.post(CHAT, json=body)).status_code == 200


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"tools": [tool(nested(20))]}, "tools[0].function.parameters", "schema_too_deep"),
        ({"tools": [tool(wide(6000))]}, "tools[0].function.parameters", "schema_too_large"),
        (
            {"tools": [tool(wide(2000), f"f{i}") for i in range(12)]},
            "tools[4].function.parameters",  # about 4,000 values each
            "schema_too_large",
        ),
        (
            {"response_format": schema_format(nested(20))},
            "response_format.json_schema.schema",
            "schema_too_deep",
        ),
        (
            {"response_format": schema_format(wide(6000))},
            "response_format.json_schema.schema",
            "schema_too_large",
        ),
        (
            {"response_format": schema_format({"type": "string", "enum": ["x" * 200_000]})},
            "response_format.json_schema.schema",
            "schema_too_large",
        ),
        ({"tools": [tool({"type": "object"}, f"f{i}") for i in range(129)]}, "tools", None),
    ],
)
async def test_schemas_are_bounded_and_the_field_named(
    client: httpx.AsyncClient,
    scripted_engine: ScriptedEngine,
    fields: dict,
    param: str,
    code: str | None,
) -> None:
    body = {"model": "scripted", "messages": MESSAGES, **fields}
    for stream in (False, True):
        response = await client.post(CHAT, json={**body, "stream": stream})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param
        if code is not None:
            assert error["code"] == code
    assert scripted_engine.requests == []


async def test_a_schema_nested_200_deep_is_a_400(client: httpx.AsyncClient) -> None:
    body = {"model": "scripted", "messages": MESSAGES, "tools": [tool(nested(200))]}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400, response.text  # the body's own depth bound


async def test_schemas_within_the_bounds_are_accepted(client: httpx.AsyncClient) -> None:
    body = {
        "model": "scripted",
        "messages": MESSAGES,
        "tools": [tool(nested(12)), tool(wide(1000), "g")],
    }
    assert (await client.post(CHAT, json=body)).status_code == 200


@pytest.mark.parametrize(
    "arguments",
    [
        "[" * 100_000,
        "[" * 5_000 + "]" * 5_000,
        '{"a": ' * 3_000 + "1" + "}" * 3_000,
        "9" * 100_000,
        '{"x": 1e999999}',
        "",
    ],
    ids=["open", "balanced", "objects", "big-int", "huge-float", "empty"],
)
async def test_pathological_tool_call_arguments_in_history(
    client: httpx.AsyncClient, arguments: str
) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    for url, body in (
        (CHAT, {"model": "scripted", "messages": messages, "max_tokens": 2}),
        ("/tokenize", {"model": "scripted", "messages": messages}),
    ):
        response = await client.post(url, json=body)
        assert response.status_code in (200, 400), response.text


async def test_tokenize_refuses_deep_and_untyped_bodies(client: httpx.AsyncClient) -> None:
    raw = b'{"model": "scripted", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = await client.post(
        "/tokenize", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    plain = await client.post(
        "/tokenize", content=b'{"prompt": "a"}', headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 415


# Work bounds: what one request may ask the engine for (2,048-token context here, so a
# choice's default `max_tokens` is 512; `--max-request-tokens` 32,768).
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, {"messages": MESSAGES, "n": 128, "max_tokens": 1000}, "n"),
        (CHAT, {"messages": MESSAGES, "n": 128}, "n"),  # the default max_tokens counts
        (COMPLETIONS, {"prompt": ["x"] * 64, "max_tokens": 1000}, "max_tokens"),
        (CHAT, {"messages": MESSAGES, "n": 128, "max_tokens": 1000, "stream": True}, "n"),
    ],
)
async def test_work_over_the_per_request_bound_is_refused(
    client: httpx.AsyncClient,
    scripted_engine: ScriptedEngine,
    path: str,
    body: dict,
    param: str,
) -> None:
    response = await client.post(path, json={"model": "scripted", **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        param,
        "request_too_large",
    )
    assert scripted_engine.requests == []


async def test_a_request_that_could_never_fit_the_kv_budget_is_refused_at_once() -> None:
    engine = ScriptedEngine(kv_cache_tokens=1000)
    async with app_client(engine) as http:
        body = {"model": "scripted", "messages": MESSAGES, "n": 4, "max_tokens": 300}
        response = await http.post(CHAT, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["param"], error["code"]) == ("max_tokens", "request_too_large")
        assert engine.requests == []
        fits = await http.post(CHAT, json={**body, "n": 2})
        assert fits.status_code == 200, fits.text


async def test_priority_below_zero_is_clamped_not_refused(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    response = await client.post(
        CHAT, json={"model": "scripted", "messages": MESSAGES, "priority": -1}
    )
    assert response.status_code == 200
    assert scripted_engine.requests[-1].priority == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/tokenize", {"prompt": "hi"}),
        ("/detokenize", {"tokens": [1]}),
    ],
)
async def test_a_model_name_past_256_characters_is_model_not_found(
    client: httpx.AsyncClient, path: str, body: dict[str, object]
) -> None:
    """Bounded while decoding: it never reaches a key check, a log line or the usage
    table; the answer quotes only the first 256 characters."""
    response = await client.post(path, json={**body, "model": "m" * 100_000})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert f"`{'m' * 256}...`" in error["message"] and len(error["message"]) < 350
    at_bound = await client.post(path, json={**body, "model": "m" * 256})
    assert at_bound.status_code == 404  # decoded, then looked up: an unknown name
    assert f"`{'m' * 256}`" in at_bound.json()["error"]["message"]
