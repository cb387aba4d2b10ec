"""Errors of the HTTP side, and the one place that maps every error to a response.

Code raises; `exception_handlers` turns each exception into the OpenAI envelope
`{"error": {"message", "type", "param", "code"}}`. Nothing returns errors as values.
"""

from __future__ import annotations

import logging
import math
import re

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException

from app.anthropic_errors import encode_anthropic, is_anthropic_path
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


class APIError(Exception):
    status_code = 500
    error_type = "server_error"
    retry_after: int | None = None  # seconds; sent as Retry-After and in the body

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> ErrorBody:
        body = ErrorBody(
            message=self.message, type=self.error_type, param=self.param, code=self.code
        )
        if self.retry_after is not None:
            body.retry_after = self.retry_after
        return body

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(self.retry_after)}


class InvalidRequest(APIError):
    status_code = 400
    error_type = "invalid_request_error"


class UnsupportedMediaType(APIError):
    """A POST body that is not declared `application/json`: a cross-site form post
    (`text/plain`, a urlencoded form) must not drive the server."""

    status_code = 415
    error_type = "invalid_request_error"

    def __init__(self, content_type: str) -> None:
        shown = f"`{content_type}`" if content_type else "no Content-Type"
        super().__init__(
            f"Request bodies must be JSON with `Content-Type: application/json`; got {shown}.",
            code="unsupported_media_type",
        )


class ModelNotFound(APIError):
    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )


class KeyNotFoundError(APIError):
    """An operator named a key id that does not exist."""

    status_code = 404
    error_type = "invalid_request_error"


class ServiceUnavailable(APIError):
    status_code = 503
    error_type = "service_unavailable"

    def __init__(
        self, message: str, retry_after: float = 5, code: str = "service_unavailable"
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = max(1, math.ceil(retry_after))


class DatabaseUnavailable(ServiceUnavailable):
    """The tenant database (stored data) cannot be opened or reached. The reason, which
    names files and hosts, is for the operator's log, not the client."""

    def __init__(self) -> None:
        super().__init__(
            "The database is unavailable; try again shortly.", code="database_unavailable"
        )


class InvalidKey(APIError):
    """Missing, malformed, unknown or revoked: the client gets one message for all."""

    status_code = 401
    error_type = "invalid_request_error"

    def __init__(self) -> None:
        super().__init__(
            "Incorrect API key provided. Send a valid key as `Authorization: Bearer <key>` "
            "or `x-api-key: <key>`.",
            code="invalid_api_key",
        )

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class KeyStoreUnavailable(ServiceUnavailable):
    """The key database cannot be read and no cached answer covers the key."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(
            "The key store is unavailable; try again shortly.",
            retry_after=1,
            code="key_store_unavailable",
        )
        self.reason = reason


class Conflict(APIError):
    """An operator's request the current state refuses."""

    status_code = 409
    error_type = "invalid_request_error"


class TooManyRequests(APIError):
    """A client over its fair share of the server (admission), not a global overload."""

    status_code = 429
    error_type = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after: float, code: str) -> None:
        super().__init__(message, code=code)
        self.retry_after = max(1, math.ceil(retry_after))


class FileNotFound(APIError):
    """A file id that is unknown, or another owner's (the same answer: a key learns
    nothing of other keys' files)."""

    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, file_id: str, param: str = "file_id") -> None:
        shown = file_id if len(file_id) <= 64 else file_id[:64] + "..."
        super().__init__(f"No such File object: {shown}", param=param, code="file_not_found")


class StorageUnavailable(ServiceUnavailable):
    """The database that holds files cannot be reached or opened."""

    def __init__(self) -> None:
        super().__init__(
            "The file store's database is unavailable; try again shortly.",
            code="database_unavailable",
        )


class PayloadTooLarge(APIError):
    """A body over its bound, refused while it streams in (what came is dropped)."""

    status_code = 413
    error_type = "invalid_request_error"


class NotMultipart(APIError):
    """An upload that is not `multipart/form-data`."""

    status_code = 415
    error_type = "invalid_request_error"

    def __init__(self, content_type: str) -> None:
        shown = f"`{content_type}`" if content_type else "no Content-Type"
        super().__init__(
            "Upload files as `multipart/form-data` with a `file` part and a `purpose` "
            f"field; got {shown}.",
            code="unsupported_media_type",
        )


class InvalidFileLine(InvalidRequest):
    """A line of an uploaded batch file that cannot run: the message names the line
    (1-based, counting every line of the file) and, once known, its `custom_id`."""

    def __init__(self, line: int, custom_id: str | None, problem: str) -> None:
        where = f"line {line}"
        if custom_id is not None:
            shown = custom_id if len(custom_id) <= 64 else custom_id[:64] + "..."
            where += f" (custom_id {shown!r})"
        super().__init__(f"{where}: {problem}", param="file", code="invalid_batch_line")
        self.line = line
        self.custom_id = custom_id


# How much of a client's response id an error message repeats.
_SHOWN_ID_CHARS = 80


class ResponseNotFound(APIError):
    """A stored response that is unknown, expired, deleted or another owner's: the same
    answer for each, so a key learns nothing of other tenants' responses."""

    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, response_id: str, param: str | None = None) -> None:
        shown = response_id[:_SHOWN_ID_CHARS]
        if len(response_id) > _SHOWN_ID_CHARS:
            shown += "..."
        super().__init__(
            f"Response with id '{shown}' not found.", param=param, code="response_not_found"
        )
        self.response_id = response_id


class ChainTooLong(APIError):
    """A `previous_response_id` chain over its bounds (responses or stored bytes)."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="previous_response_id", code="response_chain_too_long")


class StoredTooLarge(APIError):
    """A response too large to store (`store: false` stores nothing)."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"The response takes {size} bytes to store, over the server's limit of {limit} "
            "bytes; send `store: false` to keep nothing.",
            param="store",
            code="stored_response_too_large",
        )


_MSGSPEC_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")


class ClientDisconnected(APIError):
    """The client closed the connection before its response began; its work was ended.
    No one reads this answer; 499 (nginx's "client closed request") marks it in logs."""

    status_code = 499
    error_type = "client_closed_request"

    def __init__(self) -> None:
        super().__init__("The client closed the connection.", code="client_disconnected")


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
