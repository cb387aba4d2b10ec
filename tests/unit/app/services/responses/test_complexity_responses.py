"""Complexity of what reads a Responses request's bytes: the body's decoding, the input
items by type and their conversion to chat messages (long histories, one assistant turn
of many calls or many reasoning items, many parts), tools and namespaces, and opening
sealed reasoning.

Each case runs its worst shape at n, 2n, 4n and 8n; its CPU time must grow about
linearly (tests.corpus.growth)."""

from __future__ import annotations

import json
from typing import Any

from app.errors import InvalidRequest
from app.schemas.responses import ResponsesRequest, responses_request_decoder
from app.services.responses.request import chat_request
from app.services.responses.sealing import ReasoningSeal
from tests.corpus.growth import assert_linear, swallow

SEAL = ReasoningSeal(secret=bytes(32))


def decoded(items: Any, **fields: Any) -> ResponsesRequest:
    body = {"model": "m", "input": items, **fields}
    return responses_request_decoder.decode(json.dumps(body).encode())


def convert(request: ResponsesRequest) -> Any:
    return chat_request(request, "owner", lambda blob, param: SEAL.open("owner", blob, param))


def history(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n):
        items += [
            {"role": "user", "content": [{"type": "input_text", "text": f"q{i}"}]},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "r"}],
            },
            {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        ]
    return items


def one_turn_of_calls(n: int) -> list[dict[str, Any]]:
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"}
        for i in range(n)
    ]
    return [{"role": "user", "content": "go"}, *calls]


def one_turn_of_reasoning(n: int) -> list[dict[str, Any]]:
    thoughts = [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "x" * 50}]}] * n
    return [{"role": "user", "content": "go"}, *thoughts]


def test_the_body_decodes_in_linear_time() -> None:
    def body(n: int) -> bytes:
        return json.dumps({"model": "m", "input": history(n)}).encode()

    assert_linear(responses_request_decoder.decode, body, 200, max_n=2_000)  # 100,000 items


def test_a_long_history_converts_in_linear_time() -> None:
    assert_linear(convert, lambda n: decoded(history(n)), 200)


def test_one_turn_of_many_calls_is_linear() -> None:
    assert_linear(convert, lambda n: decoded(one_turn_of_calls(n)), 1_000)


def test_one_turn_of_many_reasoning_items_is_linear() -> None:
    assert_linear(convert, lambda n: decoded(one_turn_of_reasoning(n)), 1_000)


def test_many_parts_are_linear() -> None:
    def parts(n: int) -> ResponsesRequest:
        content = [{"type": "input_text", "text": "word"}] * n
        return decoded([{"role": "user", "content": content}])

    assert_linear(convert, parts, 2_000)


def test_many_tools_and_namespaces_are_linear() -> None:
    def tools(n: int) -> ResponsesRequest:
        functions = [{"type": "function", "name": f"f{i}"} for i in range(n // 2)]
        group = {"type": "namespace", "name": "ns", "tools": functions}
        hosted = [{"type": f"hosted_{i}"} for i in range(n)]
        return decoded("hi", tools=[*functions, group, *hosted])

    # Up to the bounds on `tools` (256) and a namespace's (128).
    assert_linear(convert, tools, 4, max_n=30)


def test_sealed_reasoning_opens_in_linear_time() -> None:
    def sealed(n: int) -> ResponsesRequest:
        blob = SEAL.seal("owner", "t" * 1_000 * n)
        return decoded([{"type": "reasoning", "summary": [], "encrypted_content": blob}])

    assert_linear(convert, sealed, 16, max_n=256)  # under the 4 MB a blob may have


def test_forged_blobs_are_refused_in_linear_time() -> None:
    def forged(n: int) -> ResponsesRequest:
        return decoded(
            [{"type": "reasoning", "summary": [], "encrypted_content": "lsr1." + "A" * 4 * n}]
        )

    assert_linear(swallow(convert, InvalidRequest), forged, 10_000)
