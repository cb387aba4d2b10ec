"""Reading a `multipart/form-data` upload as it streams in, within the file bounds.

Litestar's own form parser reads the whole body into memory first (bounded by its
`request_max_body_size`, 10 MB by default); an upload of a hundred megabytes is read
here instead, chunk by chunk, through the push parser of the `multipart` package
Litestar itself depends on: the `file` part goes to a spool (memory up to a MiB, then
a temporary file) while its bytes and lines are counted, and the upload is refused the
moment it passes `--max-file-bytes` (413) or `--max-file-lines` (400), whatever the rest
of the body would have been. The `purpose` field is a few bytes; other fields are
ignored. The parser's work is linear in the body: it looks for the boundary once per
byte and keeps at most a header line or a boundary's length between chunks.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from litestar import Request
from litestar.exceptions import InternalServerException
from multipart import MultipartError, MultipartSegment, PushMultipartParser

from app.errors import ClientDisconnected, InvalidRequest, NotMultipart, PayloadTooLarge
from app.storage.lines import LineCounter

# What a form adds around the file: the boundaries, the parts' headers, `purpose`.
FORM_OVERHEAD_BYTES = 64 * 1024
# In memory up to this, then in a temporary file.
SPOOL_MEMORY_BYTES = 1024 * 1024
# A refused upload's bytes still read and dropped so that its client sees the 413.
DRAIN_BYTES = 16 * 1024 * 1024
READ_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 64  # a text field (`purpose`, `expires_after[...]`)
# The form's text fields read besides the file; any other part is ignored.
TEXT_FIELDS = ("purpose", "expires_after[anchor]", "expires_after[seconds]")
MAX_PARTS = 16
_DISCONNECTED = "client disconnected prematurely"


@dataclass(frozen=True, slots=True)
class FileLimits:
    max_bytes: int
    max_lines: int


@dataclass
class Upload:
    """A read upload: the file (in `spool`, `size` bytes, `lines` non-blank lines), its
    name, and the `purpose` field; `None` for what the form did not carry. `fields`: the
    other text fields read (`TEXT_FIELDS`), by name."""

    spool: IO[bytes]
    filename: str | None = None
    has_file: bool = False
    purpose: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    size: int = 0
    lines: int = 0
    _counter: LineCounter = field(default_factory=LineCounter)

    def chunks(self) -> Iterator[bytes]:
        """The file's content from the start, a MiB at a time."""
        self.spool.seek(0)
        while chunk := self.spool.read(READ_BYTES):
            yield chunk

    def close(self) -> None:
        self.spool.close()


def boundary_of(content_type: str) -> str:
    """The multipart boundary of a `multipart/form-data` Content-Type (else 415)."""
    media_type, _, params = content_type.partition(";")
    if media_type.strip().lower() != "multipart/form-data":
        raise NotMultipart(content_type.strip())
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            return value.strip().strip('"')
    raise InvalidRequest("The multipart Content-Type has no boundary.", code="invalid_multipart")


def _too_large(limits: FileLimits) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file is larger than this server's limit of {limits.max_bytes} bytes.",
        param="file",
        code="file_too_large",
    )


class FormReader:
    """The parser's events, applied to an `Upload`."""

    def __init__(self, upload: Upload, limits: FileLimits) -> None:
        self.upload = upload
        self.limits = limits
        self.part: str | None = None  # "file", a text field's name, or None: a part ignored
        self.field = bytearray()

    def feed(self, parser: PushMultipartParser, chunk: bytes) -> None:
        """Parse `chunk` (b"" ends the body) and apply what it completes."""
        for event in parser.parse(chunk):
            if isinstance(event, MultipartSegment):
                self.begin(event)
            elif event is None:
                self.end()
            else:
                self.data(bytes(event))

    def begin(self, segment: MultipartSegment) -> None:
        if segment.name == "file":
            if self.upload.has_file:
                raise InvalidRequest("The form has more than one `file` part.", param="file")
            self.upload.has_file = True
            self.upload.filename = segment.filename or "upload"
            self.part = "file"
        elif segment.name in TEXT_FIELDS:
            self.part = segment.name
            self.field = bytearray()
        else:
            self.part = None

    def data(self, chunk: bytes) -> None:
        if self.part == "file":
            upload = self.upload
            upload.size += len(chunk)
            if upload.size > self.limits.max_bytes:
                raise _too_large(self.limits)
            if upload._counter.feed(chunk) > self.limits.max_lines:
                raise _too_many_lines(self.limits)
            upload.spool.write(chunk)
        elif self.part is not None:
            self.field += chunk
            if len(self.field) > MAX_FIELD_BYTES:
                raise InvalidRequest(f"The `{self.part}` field is too long.", param=self.part)

    def end(self) -> None:
        if self.part == "file":
            self.upload.lines = self.upload._counter.finish()
            if self.upload.lines > self.limits.max_lines:
                raise _too_many_lines(self.limits)
        elif self.part is not None:
            value = self.field.decode("utf-8", "replace").strip()
            if self.part == "purpose":
                self.upload.purpose = value
            else:
                self.upload.fields[self.part] = value
        self.part = None


def _too_many_lines(limits: FileLimits) -> InvalidRequest:
    return InvalidRequest(
        f"The file has more than {limits.max_lines} lines, this server's limit.",
        param="file",
        code="too_many_lines",
    )


async def read_upload(request: Request[Any, Any, Any], limits: FileLimits) -> Upload:
    """The upload of `request`, read within `limits`; the caller closes it."""
    boundary = boundary_of(request.headers.get("content-type", ""))
    body_limit = limits.max_bytes + FORM_OVERHEAD_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > body_limit:
        if int(declared) <= body_limit + DRAIN_BYTES:
            await _drain(request, int(declared))
        raise _too_large(limits)  # without keeping a byte of it
    # Closed by the caller (`Upload.close`), or below if reading fails.
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
    upload = Upload(spool=spool)
    try:
        await _parse(request, upload, boundary, limits, body_limit)
    except BaseException:
        upload.close()
        raise
    return upload


def _unread(request: Request[Any, Any, Any], received: int) -> int:
    """Bytes of the body still to come, when its length was declared and is within the
    drain allowance; else 0 (a chunked body's end cannot be known without waiting)."""
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        return 0
    left = int(declared) - received
    return left if 0 < left <= DRAIN_BYTES else 0


async def _drain(request: Request[Any, Any, Any], remaining: int) -> None:
    """Read and drop the `remaining` bytes of a refused body, so that a client still
    sending it reads the 413 rather than a reset connection (nginx's lingering close).
    Only a declared length is drained: past its end there is nothing to wait for."""
    dropped = 0
    try:
        async for chunk in request.stream():
            dropped += len(chunk)
            if dropped >= remaining:
                return
    except InternalServerException:
        return  # the client left: nothing more to drop


async def _parse(
    request: Request[Any, Any, Any],
    upload: Upload,
    boundary: str,
    limits: FileLimits,
    body_limit: int,
) -> None:
    reader = FormReader(upload, limits)
    received = 0
    try:
        parser = PushMultipartParser(boundary, max_segment_count=MAX_PARTS)
        async for chunk in request.stream():
            received += len(chunk)
            if received > body_limit:
                await _drain(request, _unread(request, received))
                raise _too_large(limits)
            reader.feed(parser, chunk)
        parser.close()
    except MultipartError as exc:
        raise InvalidRequest(
            f"The multipart body is malformed: {exc}", code="invalid_multipart"
        ) from None
    except InternalServerException as exc:
        if exc.detail == _DISCONNECTED:
            raise ClientDisconnected from None
        raise
