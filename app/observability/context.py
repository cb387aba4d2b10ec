"""The request being served, for everything that runs on its behalf.

The middleware opens a `RequestRecord` per HTTP request and puts it in a context
variable; the generation service, the admission hooks and the log filter read and fill
the same record, so one request's id reaches the engine request id, every log line and
the access line without being passed through every call.
"""

from __future__ import annotations

import re
import time
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

HEADER = "x-request-id"
# A client's id is used only when it is short and plain: it goes into logs and engine ids.
_ACCEPTED_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


@dataclass(slots=True)
class RequestRecord:
    """One HTTP request as the access line reports it; never a body or a key."""

    request_id: str
    client_supplied: bool  # the id came in X-Request-Id (it may repeat: make engine ids unique)
    method: str
    path: str
    started: float = field(default_factory=time.monotonic)
    status: int = 0
    outcome: str | None = None  # an error code when the request failed (also inside a stream)
    model: str | None = None
    key_id: str | None = None  # the API key's id (never the key), once keys exist
    queue_s: float | None = None  # time admission held the request before it ran
    generation: Any = None  # the app.services.generation.Generation, for tokens and TTFT

    def engine_request_id(self, prefix: str) -> str:
        if self.client_supplied:
            return f"{prefix}-{self.request_id}-{uuid.uuid4().hex[:8]}"
        return f"{prefix}-{self.request_id}"


_current: ContextVar[RequestRecord | None] = ContextVar("lilac_request", default=None)


def accept_request_id(header_value: str | None) -> tuple[str, bool]:
    """The client's X-Request-Id when it is acceptable, else a new one; and whether it
    was the client's."""
    if header_value and _ACCEPTED_ID.fullmatch(header_value):
        return header_value, True
    return uuid.uuid4().hex, False


def current() -> RequestRecord | None:
    return _current.get()


def current_request_id() -> str | None:
    record = _current.get()
    return record.request_id if record is not None else None


def open_record(record: RequestRecord) -> Token[RequestRecord | None]:
    """Make `record` the current request; returns the token `close_record` takes."""
    return _current.set(record)


def close_record(token: Token[RequestRecord | None]) -> None:
    _current.reset(token)
