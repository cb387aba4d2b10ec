"""Errors of the HTTP side: the `APIError` family code raises.

Code raises; `app.errors.handlers` maps each exception (these, `engine.errors`, msgspec's)
to the OpenAI envelope `{"error": {"message", "type", "param", "code"}}`. Nothing
returns errors as values. The mapping's functions are importable from here too.
"""

from __future__ import annotations

import math

from app.schemas.errors import ErrorBody


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


class ModelNotHere(TooManyRequests):
    """A model this replica does not serve but another live replica of the fleet does:
    retryable, so a router retries the request on another replica."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` is served by another replica, not this one; retry the "
            "request (a router retries it on another replica).",
            1,
            code="model_not_here",
        )
        self.param = "model"


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


class StorageQuotaExceeded(PayloadTooLarge):
    """An upload that would take its key (or the anonymous owner) past
    `--max-stored-bytes-per-key`."""

    def __init__(self, held: int, adding: int, quota: int) -> None:
        super().__init__(
            f"This key holds {held} bytes of files and stored responses; this upload of "
            f"{adding} bytes would pass its quota of {quota} bytes. Free space by deleting "
            "files (`DELETE /v1/files/{file_id}`) or stored responses "
            "(`DELETE /v1/responses/{response_id}`).",
            param="file",
            code="storage_quota_exceeded",
        )


class TooManyBackgroundResponses(TooManyRequests):
    """A key (or the anonymous owner) with `--max-queued-background-per-key` background
    responses queued or running, creating another."""

    def __init__(self, limit: int, retry_after: float) -> None:
        super().__init__(
            f"This key has {limit} background responses queued or in progress, the most "
            "it may have; create another once one has ended, or cancel one first "
            "(`POST /v1/responses/{id}/cancel`).",
            retry_after,
            "too_many_background_responses",
        )


class TooManyFollowers(TooManyRequests):
    """A key (or the anonymous owner) with `--max-followers-per-key` event streams of
    background responses open on this replica, opening another."""

    def __init__(self, limit: int, retry_after: float) -> None:
        super().__init__(
            f"This key has {limit} event streams of background responses open, the most "
            "it may have at once; open another once one has ended.",
            retry_after,
            "too_many_followers",
        )


class ClientDisconnected(APIError):
    """The client closed the connection before its response began; its work was ended.
    No one reads this answer; 499 (nginx's "client closed request") marks it in logs."""

    status_code = 499
    error_type = "client_closed_request"

    def __init__(self) -> None:
        super().__init__("The client closed the connection.", code="client_disconnected")


# Sent with an answer given before the body was read whole: the connection cannot carry
# another request (the rest of the body would be read as one), so it is closed.
_CLOSE = {"Connection": "close"}


class BodyReadTimeout(APIError):
    """A request body that stopped arriving: no byte for the read timeout."""

    status_code = 408
    error_type = "invalid_request_error"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"The request body did not arrive whole: no byte came for {timeout_s:g} seconds.",
            code="request_timeout",
        )

    def headers(self) -> dict[str, str]:
        return dict(_CLOSE)


class TooManyBodies(TooManyRequests):
    """A client already sending as many request bodies as the server reads from one."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This client is already sending {limit} request bodies, the most this server "
            "reads from one client at once; finish those first.",
            1,
            code="too_many_bodies_in_flight",
        )

    def headers(self) -> dict[str, str]:
        return {**super().headers(), **_CLOSE}
