"""The frame codec: frames split from any chunking of the stream, outputs and errors
round-trip as the same types."""

from __future__ import annotations

import msgspec

from engine.errors import ContextLengthExceeded, EngineFailure, EngineRequestError
from engine.protocol import ChoiceDelta, GenerateOutput, TokenLogprob, TopLogprob
from engine.remote.frames import (
    Batch,
    Entry,
    FrameReader,
    ToParent,
    error_info,
    frame,
    to_error,
)


def test_frames_are_split_from_any_chunking() -> None:
    payloads = [b"a", b"", b"x" * 1000, b"end"]
    stream = b"".join(frame(p) for p in payloads)
    for step in (1, 3, 7, len(stream)):
        got: list[bytes] = []
        reader = FrameReader(lambda view, got=got: got.append(bytes(view)))
        for start in range(0, len(stream), step):
            reader.feed(stream[start : start + step])
        assert got == payloads


def test_a_batch_round_trips_outputs() -> None:
    output = GenerateOutput(
        prompt_tokens=3,
        choices=[
            ChoiceDelta(
                0,
                "hi",
                1,
                "stop",
                logprobs=[TokenLogprob("hi", -0.5, [TopLogprob("hi", -0.5)])],
            )
        ],
        cached_tokens=2,
    )
    batch = Batch([Entry(1, [output], 3, 1), Entry(2, [], ended=True)])
    decoded = msgspec.msgpack.Decoder(ToParent).decode(msgspec.msgpack.encode(batch))
    assert decoded == batch
    assert isinstance(decoded.entries[0].outputs[0], GenerateOutput)


def test_errors_keep_their_kind() -> None:
    context = to_error(error_info(ContextLengthExceeded(10, 5, 12)))
    assert isinstance(context, ContextLengthExceeded)
    assert (context.prompt_tokens, context.requested_output, context.param) == (10, 5, "max_tokens")
    request = to_error(error_info(EngineRequestError("bad", param="stop", code="x")))
    assert type(request) is EngineRequestError
    assert (request.message, request.param, request.code) == ("bad", "stop", "x")
    assert isinstance(to_error(error_info(RuntimeError("boom"))), EngineFailure)
