"""The SSE frame of a chat stream's most common chunk, from bytes prepared once.

Past its first chunk, a choice's chunks are nearly all one shape: some content, no
role, no reasoning, no tool call, no logprobs, no finish reason. Encoded, such a chunk
is the same bytes (the stream's id, `created`, model, the choice's index) around one
JSON string. `ContentFrames` prepares those bytes per stream and choice and writes a
frame as prefix + the encoded content + suffix: the same bytes as building the
`ChatCompletionChunk` and encoding it (tests compare the two), without three objects
and an encode of the constant parts per token.
"""

from __future__ import annotations

import msgspec
from msgspec import UnsetType

from app.schemas.chat import ChatCompletionChunk, ChunkChoice, Delta

_encode = msgspec.json.encode
# Stands for the content in the sample chunk the template is cut from. The cut is
# checked: should a field (a client's request id) hold these bytes too, that stream's
# chunks are encoded whole instead.
_MARK = "\x00lilac-content\x00"
_MARK_BYTES = _encode(_MARK)


class ContentFrames:
    """Content-only frames of one stream (its id, `created`, model and whether every
    chunk carries `"usage": null`)."""

    __slots__ = ("_chunk_usage", "_created", "_id", "_model", "_templates")

    def __init__(
        self, request_id: str, created: int, model: str, chunk_usage: UnsetType | None
    ) -> None:
        self._id = request_id
        self._created = created
        self._model = model
        self._chunk_usage = chunk_usage
        self._templates: dict[int, tuple[bytes, bytes] | None] = {}

    def frame(self, index: int, content: str) -> bytes | None:
        """`data: <chunk>\\n\\n` of a chunk with only `content` for choice `index`; None
        when this stream has no template (the caller encodes the chunk)."""
        try:
            template = self._templates[index]
        except KeyError:
            template = self._templates[index] = self._template(index)
        if template is None:
            return None
        prefix, suffix = template
        return prefix + _encode(content) + suffix

    def _template(self, index: int) -> tuple[bytes, bytes] | None:
        sample = ChatCompletionChunk(
            id=self._id,
            created=self._created,
            model=self._model,
            choices=[ChunkChoice(index=index, delta=Delta(content=_MARK))],
            usage=self._chunk_usage,
        )
        encoded = _encode(sample)
        prefix, found, suffix = encoded.partition(_MARK_BYTES)
        if not found or _MARK_BYTES in suffix:
            return None
        return b"data: " + prefix, suffix + b"\n\n"
