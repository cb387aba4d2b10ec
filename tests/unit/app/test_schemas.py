import msgspec
import pytest

from app.schemas.chat import (
    ChatCompletionChunk,
    ChunkChoice,
    Delta,
    TextPart,
    UserMessage,
    chat_request_decoder,
)


def decode(body: dict) -> object:
    return chat_request_decoder.decode(msgspec.json.encode(body))


def test_minimal_request_gets_defaults() -> None:
    request = decode({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert request.stream is False
    assert request.temperature is None
    assert request.n == 1
    assert request.messages == [UserMessage(content="hi")]


def test_content_as_text_parts() -> None:
    request = decode(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}
    )
    assert request.messages[0].content == [TextPart(text="a")]


def test_unknown_fields_are_ignored() -> None:
    request = decode(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi", "extra": 1}],
            "metadata": {"a": "b"},
            "some_future_field": True,
        }
    )
    assert request.model == "m"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "m"}, "missing required field `messages`"),
        ({"model": "m", "messages": []}, "length >= 1"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "Invalid value 'robot'"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "Expected `str | array`"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "<= 2.0",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0}, "> 0.0"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, ">= 1"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5}, "<= 4"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "`tool_call_id`"),
    ],
)
def test_invalid_requests_are_rejected(body: dict, fragment: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=None) as caught:
        decode(body)
    assert fragment in str(caught.value)


def test_chunk_omits_absent_role_and_usage() -> None:
    chunk = ChatCompletionChunk(
        id="c", created=1, model="m", choices=[ChunkChoice(index=0, delta=Delta(content="x"))]
    )
    encoded = msgspec.json.decode(msgspec.json.encode(chunk))
    assert encoded["object"] == "chat.completion.chunk"
    assert encoded["choices"][0] == {
        "index": 0,
        "delta": {"content": "x"},
        "finish_reason": None,
        "logprobs": None,
    }
    assert "usage" not in encoded
