"""Property-based fuzzing of the HTTP layer over a scripted engine.

200 generated requests per endpoint (`LILAC_FUZZ_EXAMPLES=5000` for a longer run than
`make test`'s time budget allows: at 600 per endpoint the fuzz tests reached 0.3% more
lines of app/ and engine/ than at 150, error paths that one run finds and the next
misses), mostly near-valid (a valid body with fields replaced by arbitrary JSON), must
never get a 5xx, and every error must be the OpenAI envelope. A streamed 200 is read to
its end: an error event in it fails the test as a 5xx would. Chat bodies also carry
tools, response formats and image parts (data URIs only: nothing is fetched).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.scripted import ScriptedEngine
from tests.client import SyncAppClient, assert_no_error_event, read_sse, sync_app_client
from tests.images import data_uri, png

EXAMPLES_PER_ENDPOINT = int(os.environ.get("LILAC_FUZZ_EXAMPLES", "200"))

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
TINY_PNG = data_uri(png((4, 4)))
image_urls = st.sampled_from(
    [TINY_PNG, "data:image/png;base64,AAAA", "data:text/plain;base64,aGk=", "data:,x", "ftp://x"]
) | st.text(max_size=12)
image_part = st.fixed_dictionaries(
    {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": image_urls})},
    optional={"detail": st.sampled_from(["auto", "low", "high", "max"])},
)
text_part = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)})
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "bot"]),
        "content": st.text(max_size=20)
        | st.lists(text_part | image_part, max_size=2)
        | json_values,
    },
    optional={"tool_call_id": st.text(max_size=5), "name": json_values},
)
CHAT_FIELDS = [
    "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop", "stream", "stream_options",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "logprobs",
    "top_logprobs", "max_tokens", "max_completion_tokens", "min_tokens", "stop_token_ids",
    "ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "user",
]  # fmt: skip
schema_types = st.sampled_from(["object", "string", "integer", "array", "boolean", "nope"])
schemas = (
    st.recursive(
        st.fixed_dictionaries({"type": schema_types}),
        lambda inner: (
            st.fixed_dictionaries(
                {
                    "type": st.just("object"),
                    "properties": st.dictionaries(st.text(max_size=4), inner, max_size=3),
                }
            )
            | st.fixed_dictionaries({"type": st.just("array"), "items": inner})
        ),
        max_leaves=6,
    )
    | json_values
)
tool = st.fixed_dictionaries(
    {
        "type": st.just("function") | json_values,
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["f", "g", "bad name", ""])},
            optional={
                "parameters": schemas,
                "strict": st.booleans(),
                "description": st.text(max_size=5),
            },
        ),
    }
)
response_formats = (
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "xml"])})
    | st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries(
                {"name": st.just("r")}, optional={"schema": schemas}
            ),
        }
    )
    | json_values
)
tool_choices = (
    st.sampled_from(["auto", "none", "required"])
    | st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "h"])}),
        }
    )
    | json_values
)
chat_bodies = st.fixed_dictionaries(
    {"model": st.just("scripted"), "messages": st.lists(message, max_size=3)},
    optional={
        **{field: json_values for field in CHAT_FIELDS},
        "tools": st.lists(tool, max_size=2) | json_values,
        "tool_choice": tool_choices,
        "response_format": response_formats,
        "stream": st.booleans() | json_values,
    },
)
completion_bodies = st.fixed_dictionaries(
    {"model": st.just("scripted"), "prompt": st.text(max_size=10) | json_values},
    optional={field: json_values for field in [*CHAT_FIELDS, "echo"]},
)


@pytest.fixture(scope="module")
def http() -> Iterator[SyncAppClient]:
    with sync_app_client(ScriptedEngine(max_model_len=64, supports_vision=True)) as client:
        yield client


def post_and_check(http: SyncAppClient, url: str, body: dict) -> None:
    response = http.post(url, json=body)
    assert response.status_code < 500, response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.status_code == 200
        assert_no_error_event(read_sse(response))  # an error after the 200 is a failure
    if response.status_code >= 400:
        payload = response.json()
        assert set(payload) == {"error"}
        error = payload["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]


def fuzz_settings_of(examples: int) -> settings:
    """`examples` generated requests, however slow each is (the app runs in process)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


fuzz_settings = fuzz_settings_of(EXAMPLES_PER_ENDPOINT)


@fuzz_settings
@given(body=chat_bodies)
def test_chat_never_5xx(http: SyncAppClient, body: dict) -> None:
    post_and_check(http, "/v1/chat/completions", body)


@fuzz_settings
@given(body=completion_bodies)
def test_completions_never_5xx(http: SyncAppClient, body: dict) -> None:
    post_and_check(http, "/v1/completions", body)
