"""Property-based fuzzing of POST /v1/messages and /v1/messages/count_tokens over a
scripted engine: mostly near-valid bodies (blocks of every type, tools, tool choices,
thinking, with fields replaced by arbitrary JSON) never get a 5xx, every error is in
Anthropic's shape, and a streamed 200 carries no error event."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.scripted import ScriptedEngine
from tests.anthropic_sse import read_events
from tests.client import SyncAppClient, sync_app_client
from tests.images import png
from tests.unit.app.test_fuzz import fuzz_settings_of, json_values, schemas

EXAMPLES = int(os.environ.get("LILAC_FUZZ_EXAMPLES", "150"))
TINY_PNG = base64.b64encode(png((4, 4))).decode()

sources = st.fixed_dictionaries(
    {
        "type": st.just("base64"),
        "media_type": st.sampled_from(["image/png", "image/gif", "text/plain"]),
        "data": st.sampled_from([TINY_PNG, "AAAA", "!!"]),
    }
) | st.fixed_dictionaries(
    {"type": st.just("url"), "url": st.sampled_from(["ftp://x", "data:,x", "nope"])}
)
blocks = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": st.text(max_size=8)},
        optional={"cache_control": json_values},
    ),
    st.fixed_dictionaries({"type": st.just("image"), "source": sources | json_values}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": st.sampled_from(["t1", ""]),
            "name": st.sampled_from(["f", "g"]),
            "input": json_values,
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": st.sampled_from(["t1", ""])},
        optional={"content": st.text(max_size=5) | json_values, "is_error": json_values},
    ),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.sampled_from(["document", "server_tool_use", "x"])}),
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.text(max_size=12) | st.lists(blocks, max_size=3) | json_values,
    }
)
tool = st.fixed_dictionaries(
    {"name": st.sampled_from(["f", "g", "bad name", ""]), "input_schema": schemas},
    optional={"description": st.text(max_size=4), "type": st.sampled_from(["custom", "bash"])},
)
tool_choices = (
    st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "none", "tool", "x"])})
    | st.fixed_dictionaries({"type": st.just("tool"), "name": st.sampled_from(["f", "h"])})
    | json_values
)
thinking = (
    st.fixed_dictionaries({"type": st.sampled_from(["disabled", "adaptive", "enabled", "x"])})
    | st.fixed_dictionaries({"type": st.just("enabled"), "budget_tokens": json_values})
    | json_values
)
FIELDS = ["temperature", "top_p", "top_k", "stop_sequences", "metadata", "system"]
bodies = st.fixed_dictionaries(
    {"model": st.just("scripted"), "messages": st.lists(message, max_size=3)},
    optional={
        "max_tokens": st.integers(-1, 100_000) | json_values,
        **{field: json_values for field in FIELDS},
        "tools": st.lists(tool, max_size=2) | json_values,
        "tool_choice": tool_choices,
        "thinking": thinking,
        "output_config": st.fixed_dictionaries({"effort": st.sampled_from(["low", "max", "x"])})
        | json_values,
        "stream": st.booleans() | json_values,
    },
)


@pytest.fixture(scope="module")
def http() -> Iterator[SyncAppClient]:
    with sync_app_client(ScriptedEngine(max_model_len=64, supports_vision=True)) as client:
        yield client


def post_and_check(http: SyncAppClient, url: str, body: dict) -> None:
    response = http.post(url, json=body)
    assert response.status_code < 500, response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = read_events(response)
        assert events[-1]["type"] == "message_stop", events[-1]
    if response.status_code >= 400:
        payload = response.json()
        assert set(payload) == {"type", "error"} and payload["type"] == "error"
        assert set(payload["error"]) == {"type", "message"} and payload["error"]["message"]


fuzz_settings = fuzz_settings_of(EXAMPLES)


@fuzz_settings
@given(body=bodies)
def test_messages_never_5xx(http: SyncAppClient, body: dict) -> None:
    post_and_check(http, "/v1/messages", body)


@fuzz_settings
@given(body=bodies)
def test_count_tokens_never_5xx(http: SyncAppClient, body: dict) -> None:
    post_and_check(http, "/v1/messages/count_tokens", body)
