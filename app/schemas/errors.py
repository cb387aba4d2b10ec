"""The OpenAI error envelope: every non-2xx body, and the error event of a broken stream."""

from __future__ import annotations

from msgspec import Struct


class ErrorBody(Struct):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(Struct):
    error: ErrorBody
