"""Which chat requests are checked on the event loop (a few short text messages) and
which in the request-work pool (anything whose checks grow with the request)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.schemas.chat import chat_request_decoder
from app.services.chat.service import INLINE_CHARS, INLINE_MESSAGES, checks_inline

USER = {"role": "user", "content": "Tell me a story."}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def request(**fields: Any) -> Any:
    body = {"model": "m", "messages": [USER], **fields}
    return chat_request_decoder.decode(json.dumps(body).encode())


def test_a_short_plain_chat_is_checked_inline() -> None:
    assert checks_inline(request())
    assert checks_inline(request(stop="\n", max_tokens=16, temperature=0.5))
    assert checks_inline(request(messages=[USER] * INLINE_MESSAGES))


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": [TOOL]},
        {"response_format": {"type": "json_object"}},
        {"guided_regex": "a+"},
        {"guided_choice": ["a", "b"]},
        {"structured_outputs": {"regex": "a+"}},
        {"messages": [USER] * (INLINE_MESSAGES + 1)},
        {"messages": [{"role": "user", "content": "x" * (INLINE_CHARS + 1)}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"logit_bias": {"5": 1}},
        {"stop": ["a", "b"]},
        {"stop_token_ids": [1]},
        {"allowed_token_ids": [1]},
        {"bad_words": ["x"]},
        {"chat_template_kwargs": {"x": 1}},
    ],
    ids=lambda fields: next(iter(fields)),
)
def test_what_grows_with_the_request_goes_to_the_pool(fields: dict[str, Any]) -> None:
    assert not checks_inline(request(**fields))
