"""Chat's content frames from a template are byte for byte the encoded chunk."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import UNSET

from app.schemas.chat import ChatCompletionChunk, ChunkChoice, Delta
from app.services.chat.frames import _MARK, ContentFrames
from app.transport.sse import frame

CONTENTS = [
    "Hello",
    " world",
    'quote " and backslash \\',
    "new\nline\ttab\r",
    "\x00\x1f control",
    "é ü 中文 😀",
    "\u2028\u2029",
    "</script>",
    "x" * 5000,
]


def encoded_whole(
    request_id: str, created: int, model: str, usage: object, index: int, text: str
) -> bytes:
    chunk = ChatCompletionChunk(
        id=request_id,
        created=created,
        model=model,
        choices=[ChunkChoice(index=index, delta=Delta(content=text))],
        usage=usage,  # type: ignore[arg-type]  # UNSET or None, as the generation sets it
    )
    return frame(chunk)


@pytest.mark.parametrize("usage", [UNSET, None])
@pytest.mark.parametrize(
    "model", ["scripted", 'we"ird/model é', "HuggingFaceTB/SmolLM2-135M-Instruct"]
)
def test_template_frames_equal_encoded_chunks(usage: object, model: str) -> None:
    frames = ContentFrames("chatcmpl-abc123", 1_760_000_000, model, usage)
    for index in (0, 1, 7):
        for text in CONTENTS:
            assert frames.frame(index, text) == encoded_whole(
                "chatcmpl-abc123", 1_760_000_000, model, usage, index, text
            )
            decoded = msgspec.json.decode(frames.frame(index, text)[6:-2])  # type: ignore[index]
            assert decoded["choices"][0]["delta"] == {"content": text}


def test_a_field_holding_the_mark_falls_back_to_encoding() -> None:
    """A stream whose fixed fields contain the template's mark gets no template: the
    caller encodes each chunk whole (never a frame cut in the wrong place)."""
    frames = ContentFrames("chatcmpl-x", 1, _MARK, None)
    assert frames.frame(0, "Hello") is None
