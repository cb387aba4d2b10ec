"""The shared test client and SSE reader (tests/client.py) catch what they promise to."""

from __future__ import annotations

import httpx
import pytest

from engine.scripted import ScriptedEngine
from tests.client import (
    app_client,
    assert_no_error_event,
    provided,
    read_sse,
    stream_events,
    sync_app_client,
)

CHUNK = b'data: {"choices":[]}\n\n'
ERROR = b'data: {"error":{"code":"draining"}}\n\n'
DONE = b"data: [DONE]\n\n"


def sse(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})


def test_reads_every_event_and_leaves_done_out() -> None:
    assert read_sse(CHUNK + CHUNK + DONE) == [{"choices": []}, {"choices": []}]
    assert read_sse((CHUNK + DONE).decode().replace("\n", "\r\n")) == [{"choices": []}]
    assert read_sse(": comment\n\n" + (CHUNK + DONE).decode()) == [{"choices": []}]
    assert read_sse(b'data: {"text":"a\xe2\x80\xa8b"}\n\n' + DONE) == [{"text": "a\u2028b"}]


@pytest.mark.parametrize(
    "body",
    [
        CHUNK,  # no [DONE]
        DONE + CHUNK,  # [DONE] not last
        CHUNK + DONE + DONE,  # [DONE] twice
        CHUNK + b"data: [DONE]",  # the last event never closed
        b"event: x\n" + CHUNK + DONE,  # a field OpenAI streams do not send
        b"",
    ],
)
def test_bad_framing_fails(body: bytes) -> None:
    with pytest.raises(AssertionError):
        read_sse(body)


def test_error_events_fail_unless_allowed() -> None:
    assert read_sse(CHUNK + ERROR + DONE)[-1] == {"error": {"code": "draining"}}
    with pytest.raises(AssertionError, match="error events"):
        assert_no_error_event(read_sse(CHUNK + ERROR + DONE))
    with pytest.raises(AssertionError, match="error events"):
        stream_events(sse(CHUNK + ERROR + DONE))
    assert len(stream_events(sse(CHUNK + ERROR + DONE), allow_error=True)) == 2


def test_stream_events_wants_a_200_event_stream() -> None:
    with pytest.raises(AssertionError):
        stream_events(sse(CHUNK + DONE, status=500))
    with pytest.raises(AssertionError):
        stream_events(httpx.Response(200, content=CHUNK + DONE))


async def test_app_client_reaches_the_app() -> None:
    engine = ScriptedEngine()
    async with app_client(engine) as http:
        assert provided(http.app, "models").first.engine is engine
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        response = await http.post("/v1/chat/completions", json={**body, "stream": True})
    assert stream_events(response)[0]["choices"][0]["delta"]["role"] == "assistant"


def test_sync_app_client_reaches_the_app() -> None:
    with sync_app_client(ScriptedEngine()) as http:
        assert http.get("/health").json() == {"status": "ok"}
