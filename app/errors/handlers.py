"""The one place that maps every error to a response.

`exception_handlers` turns each exception (the `app.errors` family, `engine.errors`,
msgspec's decode and validation errors) into the OpenAI envelope
`{"error": {"message", "type", "param", "code"}}`, or Anthropic's shape on its routes.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.errors import (
    APIError,
    Conflict,
    DatabaseUnavailable,
    InvalidRequest,
    ModelNotFound,
    ServiceUnavailable,
    TooManyRequests,
)
from app.errors.anthropic import encode_anthropic, is_anthropic_path
from app.observability import context
from app.schemas.errors import ErrorBody, ErrorEnvelope
from app.schemas.sampling import MAX_MODEL_CHARS, ModelNameTooLong
from engine.errors import (
    AdmissionRejected,
    AwakeElsewhere,
    Drained,
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    ModelStateConflict,
    ModelWakeFailed,
    WakeLimited,
)

log = logging.getLogger("lilac.errors")

_MSGSPEC_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")


def invalid_request_from_decode_error(error: msgspec.DecodeError) -> InvalidRequest:
    """Turn msgspec's "Expected `int`, got `str` - at `$.max_tokens`" into a 400 naming it."""
    text = str(error)
    if not isinstance(error, msgspec.ValidationError):
        return InvalidRequest(f"The request body is not valid JSON: {text}", code="invalid_json")
    match = _MSGSPEC_PATH.search(text)
    if match is None:
        return InvalidRequest(text, param=_missing_field(text) or None)
    path = match.group("path").lstrip(".")
    message = text[: match.start()]
    return InvalidRequest(message, param=_join(path, _missing_field(message)) or None)


_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")


def _missing_field(message: str) -> str:
    match = _MISSING.search(message)
    return match.group("field") if match else ""


def _join(path: str, field: str) -> str:
    return ".".join(part for part in (path, field) if part)


def error_response(error: APIError, anthropic: bool = False) -> Response[bytes]:
    """`anthropic`: the body in Anthropic's shape (its Messages API routes); the status
    and headers are the same."""
    return Response(
        content=error_content(error, anthropic),
        status_code=error.status_code,
        media_type=MediaType.JSON,
        headers=error.headers(),
    )


def error_content(error: APIError, anthropic: bool = False) -> bytes:
    """The body of an error response: OpenAI's envelope, or Anthropic's shape."""
    if anthropic:
        return encode_anthropic(error.status_code, error.message, error.param)
    return encode_error(error.body())


def encode_error(body: ErrorBody) -> bytes:
    return msgspec.json.encode(ErrorEnvelope(error=body))


def to_api_error(exc: Exception) -> APIError:
    """The single mapping from any exception to the API error a client sees."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, msgspec.DecodeError):
        return invalid_request_from_decode_error(exc)
    if isinstance(exc, ModelNameTooLong):
        return ModelNotFound(exc.model[:MAX_MODEL_CHARS] + "...")
    if isinstance(exc, EngineRequestError):
        return InvalidRequest(exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, AdmissionRejected):
        if exc.status == 429:
            return TooManyRequests(exc.message, exc.retry_after_s, exc.code)
        return ServiceUnavailable(exc.message, exc.retry_after_s, exc.code)
    if isinstance(exc, Drained):
        return ServiceUnavailable(exc.message, exc.retry_after_s, code="draining")
    if isinstance(exc, ModelWakeFailed):
        return ServiceUnavailable(exc.message, exc.retry_after_s, code="model_wake_failed")
    if isinstance(exc, AwakeElsewhere):
        return TooManyRequests(exc.message, 1, code="model_asleep_here")
    if isinstance(exc, WakeLimited):
        return TooManyRequests(exc.message, exc.retry_after_s, code="wake_limit_exceeded")
    if isinstance(exc, ModelStateConflict):
        return Conflict(exc.message, code="model_state_conflict")
    if isinstance(exc, EngineUnavailable):
        return ServiceUnavailable(str(exc) or "The model is not ready yet.")
    if isinstance(exc, EngineError):
        log.error("engine failure: %r", exc)
        return APIError("The engine failed while serving this request.", code="engine_error")
    if isinstance(exc, (OperationalError, PoolTimeout)):
        # A database busy past its wait (SQLite's lock), unreachable or out of connections:
        # the client may try again; the reason is the operator's.
        log.warning("the tenant database is unavailable: %s", str(exc).splitlines()[0])
        return DatabaseUnavailable()
    log.exception("unhandled error", exc_info=exc)
    return APIError("Internal server error.", code="internal_error")


_HTTP_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def _http_exception_handler(request: Request, exc: HTTPException) -> Response[bytes]:
    status = exc.status_code
    anthropic = is_anthropic_path(request.url.path)
    if status >= 500:
        return error_response(to_api_error(exc), anthropic)
    if anthropic:
        body_bytes = encode_anthropic(status, exc.detail)
        return Response(body_bytes, status_code=status, media_type=MediaType.JSON)
    code = "not_found" if status == 404 else None
    error_type = _HTTP_TYPES.get(status, "invalid_request_error")
    body = ErrorBody(message=exc.detail, type=error_type, code=code)
    return Response(encode_error(body), status_code=status, media_type=MediaType.JSON)


def _any_exception_handler(request: Request, exc: Exception) -> Response[bytes]:
    error = to_api_error(exc)
    record = context.current()
    if record is not None:  # the access line's outcome
        record.outcome = error.code or error.error_type
    return error_response(error, is_anthropic_path(request.url.path))


exception_handlers = {
    HTTPException: _http_exception_handler,
    Exception: _any_exception_handler,
}


async def send_error(send: Any, path: str, error: APIError) -> None:
    """The error's response (app.errors' envelope and headers; Anthropic's shape on its
    routes), sent without reaching a handler."""
    body = error_content(error, is_anthropic_path(path))
    headers = [(b"content-type", b"application/json")]
    headers.extend(
        (name.lower().encode(), value.encode()) for name, value in error.headers().items()
    )
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
