"""Complexity of the checks on raw request bytes: the depth scan (body and tool-call
arguments) and the checked decode of a whole body, on the adversarial corpus.

Each case runs at n, 2n, 4n and 8n and its CPU time must grow about linearly
(tests.corpus.growth). The first test shows the check fails for quadratic work."""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import pytest

from app.errors import InvalidRequest
from app.schemas.chat import chat_request_decoder
from app.schemas.completions import completion_request_decoder
from app.services.generation.tools import MAX_ARGUMENTS_DEPTH, template_tool_calls
from app.transport.json_limits import MAX_BODY_DEPTH, json_depth, too_deep
from app.transport.request_body import decode_checked
from perf.harness import corpus
from tests.corpus.growth import assert_linear, swallow

# The scan this module had before: a backtracking regular expression, quadratic on an
# unclosed string of escapes. Kept here to show the growth check catches it.
_BACKTRACKING_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def test_the_growth_check_fails_for_the_backtracking_scan() -> None:
    with pytest.raises(AssertionError, match=r"t\(8n\)/t\(n\)"):
        assert_linear(
            lambda raw: _BACKTRACKING_STRING.sub(b"", raw),
            corpus.unclosed_escaped_string,
            200,
            max_n=200,
            attempts=1,
        )


SCAN_SHAPES: dict[str, Callable[[int], bytes]] = {
    "unclosed string of escapes": corpus.unclosed_escaped_string,
    "backslash run": corpus.backslash_run,
    "backslash runs before quotes": corpus.backslash_runs_before_quotes,
    "deep brackets": corpus.deep_brackets,
    "brackets in strings": corpus.brackets_in_strings,
    "many short strings": corpus.many_short_strings,
    "huge number": corpus.huge_number,
    "unicode escapes": corpus.unicode_escapes,
    "lone surrogates": corpus.lone_surrogates,
}


@pytest.mark.parametrize("shape", list(SCAN_SHAPES))
def test_json_depth_is_linear(shape: str) -> None:
    assert_linear(json_depth, SCAN_SHAPES[shape], 1_000)


@pytest.mark.parametrize("shape", list(SCAN_SHAPES))
def test_checked_decode_of_a_chat_body_is_linear(shape: str) -> None:
    make = SCAN_SHAPES[shape]

    def body(n: int) -> bytes:
        return corpus.with_raw_field(corpus.chat_body(), make(n))

    decode = swallow(
        lambda raw: decode_checked(raw, chat_request_decoder), InvalidRequest, msgspec.DecodeError
    )
    assert_linear(decode, body, 1_000)


def test_checked_decode_of_the_unclosed_string_body_itself_is_linear() -> None:
    decode = swallow(
        lambda raw: decode_checked(raw, chat_request_decoder), InvalidRequest, msgspec.DecodeError
    )
    assert_linear(decode, corpus.unclosed_escaped_string, 1_000)


def test_checked_decode_of_many_messages_is_linear() -> None:
    decode = swallow(lambda raw: decode_checked(raw, chat_request_decoder), InvalidRequest)
    assert_linear(decode, lambda n: corpus.encoded(corpus.chat_body(corpus.many_messages(n))), 100)


def test_checked_decode_of_a_token_prompt_is_linear() -> None:
    def body(n: int) -> bytes:
        return corpus.encoded({"model": "m", "prompt": corpus.token_prompt(n)})

    assert_linear(lambda raw: decode_checked(raw, completion_request_decoder), body, 1_000)


@pytest.mark.parametrize(
    "make", [corpus.unclosed_arguments, corpus.deep_arguments], ids=["unclosed", "deep"]
)
def test_tool_call_arguments_are_linear(make: Callable[[int], str]) -> None:
    def request(n: int) -> object:
        body = corpus.chat_body(corpus.tool_call_history(make(n)))
        return chat_request_decoder.decode(corpus.encoded(body))

    assert_linear(lambda req: template_tool_calls(req.messages[1].tool_calls), request, 1_000)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the scan's meaning


def test_the_attack_body_is_refused_as_too_deep() -> None:
    body = corpus.unclosed_escaped_string(32_000)
    assert len(body) <= 64 * 1024
    assert json_depth(body) == 65 and too_deep(body)


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"", 0),
        (b"1", 0),
        (b"[]", 1),
        (b'["[[[", {"a": "}}}"}]', 2),
        (b'["\\"[[", []]', 2),  # an escaped quote does not end the string
        (b'["\\\\", []]', 2),  # an escaped backslash does not escape the quote after it
        (b'["\\\\\\"[", [[]]]', 3),
        (b'"\\\\\\\\"[', 1),  # four backslashes: the quote ends the string
        (b'{"a": [1, {"b": [[]]}]}', 5),
        (b'"[" [', 1),
    ],
)
def test_json_depth_is_exact(raw: bytes, depth: int) -> None:
    for chunk in (1, 2, 3, 64 * 1024):  # state carried across chunk borders
        assert json_depth(raw, chunk) == depth


def test_json_depth_is_exact_over_every_prefix_of_a_valid_document() -> None:
    import json
    import random

    rng = random.Random(7)

    def value(level: int) -> object:
        pick = rng.random()
        if level > 7 or pick < 0.3:
            return rng.choice(['a\\"[', "\\\\", "\\" * rng.randint(0, 5), "{]}[", "é", 1, None])
        if pick < 0.65:
            return [value(level + 1) for _ in range(rng.randint(0, 3))]
        return {f'k"{i}\\': value(level + 1) for i in range(rng.randint(0, 3))}

    def walk(raw: bytes) -> int:  # a parser's view: byte by byte
        depth = deepest = 0
        inside = escaped = False
        for byte in raw:
            if inside:
                if escaped:
                    escaped = False
                elif byte == ord("\\"):
                    escaped = True
                elif byte == ord('"'):
                    inside = False
            elif byte == ord('"'):
                inside = True
            elif byte in b"[{":
                depth += 1
                deepest = max(deepest, depth)
            elif byte in b"]}":
                depth -= 1
        return deepest

    for _ in range(200):
        doc = json.dumps(value(0), ensure_ascii=rng.random() < 0.5).encode()
        for cut in range(0, len(doc) + 1, max(1, len(doc) // 16)):
            expected = walk(doc[:cut])
            for chunk in (1, 3, 64 * 1024):
                assert json_depth(doc[:cut], chunk) == expected, (doc[:cut], chunk)


def test_tool_arguments_that_nest_too_deep_stay_text() -> None:
    arguments = "[" * (MAX_ARGUMENTS_DEPTH + 1) + "]" * (MAX_ARGUMENTS_DEPTH + 1)
    request = chat_request_decoder.decode(
        corpus.encoded(corpus.chat_body(corpus.tool_call_history(arguments)))
    )
    (call,) = template_tool_calls(request.messages[1].tool_calls)
    assert call["function"]["arguments"] == arguments
    assert MAX_ARGUMENTS_DEPTH < MAX_BODY_DEPTH
