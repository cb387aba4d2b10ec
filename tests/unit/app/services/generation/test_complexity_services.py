"""Complexity of the checks a decoded request goes through before admission: sampling
options (stop strings, `logit_bias`), the chat and completions engine requests (long
histories, tool-call arguments, schemas, token prompts), vLLM's constraint fields,
image parts and data URIs, and the small parsers of headers and errors.

Each case runs its worst shape (tests.corpus.adversarial) at n, 2n, 4n and 8n; its CPU
time must grow about linearly (tests.corpus.growth)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from app.errors import InvalidRequest
from app.errors.handlers import invalid_request_from_decode_error
from app.observability.context import accept_request_id
from app.schemas.chat import ChatCompletionRequest, chat_request_decoder
from app.schemas.completions import CompletionRequest, completion_request_decoder
from app.services.chat.service import engine_request, messages_for_template
from app.services.completions import service as completions
from app.services.generation.extensions import structured_output
from app.services.generation.sampling import sampling_options
from app.services.images.decoding import ImageRef, decode_data_uri, decode_image, image_refs
from engine.errors import EngineRequestError
from engine.schema_bounds import forget_valid_schemas
from perf.harness import corpus
from tests.corpus.growth import assert_linear, swallow

REFUSED = (InvalidRequest, EngineRequestError, msgspec.ValidationError)


def chat(**fields: Any) -> ChatCompletionRequest:
    return chat_request_decoder.decode(corpus.encoded(corpus.chat_body(**fields)))


def chat_of(messages: list[dict[str, Any]], **fields: Any) -> ChatCompletionRequest:
    return chat_request_decoder.decode(corpus.encoded(corpus.chat_body(messages, **fields)))


def completion(**fields: Any) -> CompletionRequest:
    body = {"model": corpus.MODEL, "prompt": "hi", "max_tokens": 4, **fields}
    return completion_request_decoder.decode(corpus.encoded(body))


def options(request: ChatCompletionRequest) -> Any:
    return sampling_options(request, max_tokens=4)


def fmt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}


# ------------------------------------------------------------------ sampling options


def test_stop_strings_are_linear() -> None:
    assert_linear(options, lambda n: chat(stop=corpus.stop_strings(n)), 10_000)


def test_logit_bias_of_many_keys_is_linear() -> None:
    assert_linear(options, lambda n: chat(logit_bias=corpus.logit_bias(n)), 1_000)


def test_logit_bias_of_long_keys_is_linear_in_keys() -> None:
    # `int()` is quadratic in digits; Python caps a decimal string at 4,300 digits.
    def request(n: int) -> ChatCompletionRequest:
        keys = {"1" * 4_000 + f"{i:06d}"[:6]: 1.0 for i in range(n)}  # 4,006 digits each
        return chat(logit_bias=keys)

    assert_linear(swallow(options, InvalidRequest), request, 10)


def test_a_key_past_the_digit_cap_is_a_400() -> None:
    with pytest.raises(InvalidRequest) as raised:
        options(chat(logit_bias=corpus.long_logit_bias_key(5_000)))
    assert raised.value.param == "logit_bias"


# ------------------------------------------------------------------ chat requests


def test_a_long_history_is_linear() -> None:
    assert_linear(
        lambda request: engine_request(request, "id"),
        lambda n: chat_of(corpus.many_messages(n)),
        100,
    )


def test_messages_for_template_is_linear() -> None:
    assert_linear(
        lambda request: messages_for_template(request.messages),
        lambda n: chat_of(corpus.many_messages(n)),
        100,
    )


@pytest.mark.parametrize(
    "make", [corpus.unclosed_arguments, corpus.deep_arguments], ids=["unclosed", "deep"]
)
def test_tool_call_arguments_in_history_are_linear(make: Any) -> None:
    assert_linear(
        lambda request: engine_request(request, "id"),
        lambda n: chat_of(corpus.tool_call_history(make(n))),
        1_000,
    )


@pytest.mark.parametrize(
    "make",
    [corpus.wide_schema, corpus.long_enum_schema, corpus.nested_any_of, corpus.pattern_schema],
    ids=["wide", "long enum", "nested anyOf", "patterns"],
)
def test_response_format_schemas_are_linear(make: Any) -> None:
    # Up to the schema bounds and past them (a refusal counts too).
    assert_linear(
        swallow(lambda request: engine_request(request, "id"), *REFUSED),
        lambda n: chat(response_format=fmt(make(n))),
        50,
        max_n=2_000,
    )


def test_tools_up_to_the_bound_are_linear() -> None:
    def request(n: int) -> ChatCompletionRequest:
        tools = [
            {
                "type": "function",
                "function": {"name": f"f{i}", "parameters": corpus.wide_schema(60)},
            }
            for i in range(n)
        ]
        return chat(tools=tools)

    # 2 to 16 tools (128 at most, 20,000 schema values in all): each schema is checked.
    def build(r: ChatCompletionRequest) -> Any:
        forget_valid_schemas()
        return engine_request(r, "id")

    assert_linear(swallow(build, *REFUSED), request, 2, max_n=2)


@pytest.mark.parametrize("field", ["guided_json", "structured_outputs"])
def test_schema_given_as_a_string_is_linear(field: str) -> None:
    def request(n: int) -> ChatCompletionRequest:
        text = json.dumps(corpus.wide_schema(n))
        value = text if field == "guided_json" else {"json": text}
        return chat(**{field: value})

    def check(r: ChatCompletionRequest) -> Any:
        forget_valid_schemas()  # the first check of a schema: what a new one costs
        return structured_output(r, None)

    assert_linear(swallow(check, *REFUSED), request, 50, max_n=1_000)


# ------------------------------------------------------------------ completions


def test_a_token_prompt_is_linear() -> None:
    assert_linear(
        lambda request: completions.engine_requests(request, "id", None, 50_000),
        lambda n: completion(prompt=corpus.token_prompt(n)),
        1_000,
    )


def test_completions_schema_is_linear() -> None:
    assert_linear(
        swallow(lambda r: completions.engine_requests(r, "id", None, 50_000), *REFUSED),
        lambda n: completion(response_format=fmt(corpus.wide_schema(n))),
        50,
        max_n=2_000,
    )


# ------------------------------------------------------------------ images

REF = ImageRef(1, 0, "", "auto")


def test_wrapped_data_uris_are_linear() -> None:
    assert_linear(
        lambda url: decode_data_uri(ImageRef(1, 0, url, "auto"), 10**9),
        corpus.wrapped_data_uri,
        1_000,
    )


def test_an_image_header_over_the_pixel_limit_is_refused_in_linear_time() -> None:
    def refuse(url: str) -> None:
        ref = ImageRef(1, 0, url, "auto")
        with pytest.raises(InvalidRequest) as raised:
            decode_image(ref, decode_data_uri(ref, 10**9), 25_000_000)
        assert raised.value.code == "image_too_large"

    assert_linear(refuse, corpus.bomb_data_uri, 1_000)


def test_garbage_image_bytes_are_refused_in_linear_time() -> None:
    def refuse(data: bytes) -> None:
        with pytest.raises(InvalidRequest):
            decode_image(REF, data, 25_000_000)

    assert_linear(refuse, lambda n: b"\x89PNG\r\n\x1a\n" + b"\xff" * n, 1_000)


def test_image_parts_are_found_in_linear_time() -> None:
    assert_linear(
        lambda request: image_refs(request.messages),
        lambda n: chat_of(corpus.image_parts(n)),
        100,
    )


def test_invalid_base64_is_refused_in_linear_time() -> None:
    def refuse(url: str) -> None:
        with pytest.raises(InvalidRequest):
            decode_data_uri(ImageRef(1, 0, url, "auto"), 10**9)

    def url(n: int) -> str:
        return "data:image/png;base64," + base64.b64encode(b"\0" * n).decode() + "!"

    assert_linear(refuse, url, 1_000)


# ------------------------------------------------------------------ headers and errors


def test_request_ids_are_judged_in_linear_time() -> None:
    assert_linear(accept_request_id, lambda n: "a" * n + "\n", 10_000)


def test_decode_error_messages_are_parsed_in_linear_time() -> None:
    def error(n: int) -> msgspec.ValidationError:
        return msgspec.ValidationError("Expected `int`" + " - at `$" * n)

    assert_linear(invalid_request_from_decode_error, error, 1_000)
