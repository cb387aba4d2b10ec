"""The request being served, for everything that runs on its behalf.

The middleware opens a `RequestRecord` per HTTP request and puts it in a context
variable; the generation service, the admission hooks and the log filter read and fill
the same record, so one request's id reaches the engine request id, every log line and
the access line without being passed through every call.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from app.usage_source import UsageSource

HEADER = "x-request-id"
# A client's id goes into logs, engine ids, response ids and the usage table: it keeps
# only plain characters (each other one becomes `_`) and its first 36 (a UUID, or
# OpenAI's `req_` + 32 hex, fits whole), so `<prefix>-<id>-<32 hex>` fits the usage
# table's 80-character `request_id` for any prefix up to 10 characters.
MAX_CLIENT_ID_CHARS = 36
_UNSAFE = re.compile(r"[^A-Za-z0-9._:\-]")


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
    usage_source: UsageSource | None = None  # the request's generation: tokens and TTFT

    def engine_request_id(self, prefix: str) -> str:
        """The engine request's (and the response's) id. A client may send the same
        X-Request-Id twice, or another tenant's: a whole UUID after it keeps this id as
        unique as one the server made, so no usage row is ever taken for another's."""
        if self.client_supplied:
            return f"{prefix}-{self.request_id}-{uuid.uuid4().hex}"
        return f"{prefix}-{self.request_id}"

    @property
    def client_request_id(self) -> str | None:
        return self.request_id if self.client_supplied else None


_current: ContextVar[RequestRecord | None] = ContextVar("lilac_request", default=None)


def sanitize_request_id(header_value: str) -> str:
    """A client's id cut to `MAX_CLIENT_ID_CHARS`, every character outside
    `A-Za-z0-9._:-` replaced by `_`: linear time, bounded output."""
    return _UNSAFE.sub("_", header_value.strip()[:MAX_CLIENT_ID_CHARS])


def accept_request_id(header_value: str | None) -> tuple[str, bool]:
    """The client's X-Request-Id, sanitized, when it has one; else a new one; and
    whether it was the client's."""
    if header_value and header_value.strip():
        return sanitize_request_id(header_value), True
    return new_request_id(), False


def new_request_id() -> str:
    """32 hex digits, as a UUID's: the millisecond it was made (12 digits) then 80
    random bits, as UUIDv7 lays them out. Ids made later sort later, so the usage
    table's unique index on the response id takes each new row at its end: a group
    commit writes a page or two of it, not a page per row (with random ids, every row
    lands on a different page of the index, and each such page goes to the journal)."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


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
