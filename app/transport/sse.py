"""Server-sent events framing: each event is `data: <json>\n\n`; `data: [DONE]` ends a stream."""

from __future__ import annotations

from typing import Any

import msgspec

from app.schemas.errors import ErrorBody, ErrorEnvelope

DONE = b"data: [DONE]\n\n"
_encoder = msgspec.json.Encoder()


def frame(payload: Any) -> bytes:
    """Encode one payload (a msgspec Struct) as an SSE data event."""
    buffer = bytearray(b"data: ")
    _encoder.encode_into(payload, buffer, 6)
    buffer += b"\n\n"
    return bytes(buffer)


def error_frame(body: ErrorBody) -> bytes:
    return frame(ErrorEnvelope(error=body))
