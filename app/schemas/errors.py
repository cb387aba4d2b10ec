"""The OpenAI error envelope: every non-2xx body, and the error event of a broken stream."""

from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType


class ErrorBody(Struct):
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    # Seconds until a retry may succeed: set on 429 and 503 only (then also Retry-After).
    retry_after: int | UnsetType = UNSET


class ErrorEnvelope(Struct):
    error: ErrorBody
