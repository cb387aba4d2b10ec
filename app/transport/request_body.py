"""Reading a POST body: its declared type, its nesting depth, then the typed decode.

Every JSON endpoint reads its body here, so the checks cannot be skipped by one:
`Content-Type` must be `application/json` (415 otherwise: a web page may post
`text/plain` to a server on its visitor's loopback without asking), the nesting must
stay within `MAX_BODY_DEPTH` (400: deeper JSON would exhaust the decoder's recursion,
even inside a field nothing reads), then msgspec decodes it into the wire type. Large
bodies are scanned and decoded off the event loop. A client that leaves while sending
its body gets a 499 in the access log and the metrics, not a 500 with a traceback.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import InternalServerException

from app.errors import ClientDisconnected, InvalidRequest, UnsupportedMediaType
from app.transport.json_limits import MAX_BODY_DEPTH, too_deep
from engine.offload import off_loop

T = TypeVar("T")

JSON_MEDIA_TYPE = "application/json"
# Below this a scan and a decode take well under a millisecond: not worth a thread hop.
INLINE_BYTES = 64 * 1024
# What Litestar's body reader raises with when the client disconnects mid-body.
_DISCONNECTED = "client disconnected prematurely"


def check_json_content_type(request: Request[Any, Any, Any]) -> None:
    declared = request.headers.get("content-type", "")
    media_type = declared.split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(declared.strip())


def decode_checked(raw: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    if too_deep(raw):
        raise InvalidRequest(
            f"The request body nests JSON deeper than {MAX_BODY_DEPTH} levels.",
            code="json_too_deep",
        )
    return decoder.decode(raw)


async def read_body(request: Request[Any, Any, Any]) -> bytes:
    """The whole body; a client that leaves before sending all of it is a client that
    left (499, no traceback), not a server error. Litestar reports that departure as an
    `InternalServerException` while the connection's `http.disconnect` arrives."""
    try:
        return await request.body()
    except InternalServerException as exc:
        if exc.detail == _DISCONNECTED:
            raise ClientDisconnected from None
        raise


async def read_json(request: Request[Any, Any, Any], decoder: msgspec.json.Decoder[T]) -> T:
    """The body of `request` decoded by `decoder`, after the checks above. The body is
    read (within the body limit) before its type is judged: a response sent while the
    client's bytes sit unread closes the connection under a client that reuses it."""
    raw = await read_body(request)
    check_json_content_type(request)
    if len(raw) <= INLINE_BYTES:
        return decode_checked(raw, decoder)
    return await off_loop(decode_checked, raw, decoder)
