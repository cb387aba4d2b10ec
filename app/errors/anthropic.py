"""Errors in Anthropic's shape, for the routes of its Messages API.

The statuses, `Retry-After` and the decision of what went wrong stay app.errors' (the
one mapping); this module only re-dresses an error for clients of the Anthropic API:
`{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}`, with
Anthropic's type names for the same statuses.
"""

from __future__ import annotations

import msgspec

from app.schemas.messages import AnthropicErrorBody, AnthropicErrorEnvelope

# Anthropic's routes: these paths and everything under them.
ANTHROPIC_PATHS = ("/v1/messages",)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def is_anthropic_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in ANTHROPIC_PATHS)


def anthropic_type(status: int) -> str:
    """Anthropic's error type of an HTTP status (`api_error` for other server errors)."""
    if status in _TYPES:
        return _TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_body(status: int, message: str, param: str | None = None) -> AnthropicErrorEnvelope:
    """Anthropic's messages name the field first (`max_tokens: Field required`)."""
    if param and f"`{param}`" not in message and not message.startswith(param):
        message = f"{param}: {message}"
    return AnthropicErrorEnvelope(AnthropicErrorBody(anthropic_type(status), message))


def encode_anthropic(status: int, message: str, param: str | None = None) -> bytes:
    return msgspec.json.encode(anthropic_body(status, message, param))
