"""The Files API: POST /v1/files (multipart upload), GET /v1/files (a page of the key's
files), GET /v1/files/{file_id}, GET /v1/files/{file_id}/content, DELETE
/v1/files/{file_id}. A file belongs to the key that uploaded it: another key's file is
404, as an unknown one is.

An upload is read as it streams in, within `--max-file-bytes` and `--max-file-lines`
(app.transport.uploads); a `batch` file is then checked line by line
(app.services.batches.input) off the event loop, and stored only if every line can run.

With keys, an upload and each read (list, retrieve, content) take one of the key's
requests per minute; a delete takes none, so a key over its rate can still free space.
An upload names its expiry (`expires_after`, app.transport.file_expiry) or gets the
server's retention, and is refused past the owner's stored-bytes quota
(app.tenancy.quotas): a keyless server's one anonymous owner has one quota."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

from litestar import Request, delete, get, post
from litestar.response import Stream

from app.errors import InvalidRequest
from app.routes.deps import (
    FileLimitsDep,
    FileStoreDep,
    ModelsDep,
    ResponseStoreDep,
    StorageQuotaDep,
)
from app.schemas.files import FileDeleted, FileList, FileWire
from app.services.batches.input import BatchRules, validate_batch_file
from app.storage.files import FileObject
from app.tenancy.consumes import Consumes
from app.tenancy.scope import owner_of
from app.tenancy.service import request_key, request_tenancy
from app.transport.file_expiry import expires_after_s
from app.transport.uploads import Upload, read_upload
from engine.offload import off_loop

# Purposes an upload may name: only batch input is served.
UPLOAD_PURPOSES = ("batch",)
MAX_LIST_LIMIT = 10_000


def wire(file: FileObject) -> FileWire:
    return FileWire(
        id=file.id,
        bytes=file.bytes,
        created_at=file.created_at,
        filename=file.filename,
        purpose=file.purpose,
        status=file.status,
        expires_at=file.expires_at,
    )


def _owner(request: Request[Any, Any, Any]) -> str:
    return owner_of(request_key(request))


async def _count_request(request: Request[Any, Any, Any]) -> None:
    """Take one of the key's requests per minute (429 past it); nothing without keys."""
    key = request_key(request)
    if key is not None:
        await request_tenancy(request).admit(key, Consumes("/v1/files"))


@post("/v1/files", status_code=200, request_max_body_size=None)
async def upload_file(
    request: Request[Any, Any, Any],
    file_store: FileStoreDep,
    file_limits: FileLimitsDep,
    models: ModelsDep,
    response_store: ResponseStoreDep,
    storage_quota: StorageQuotaDep,
) -> FileWire:
    """A multipart form with a `file` part, a `purpose` field and optionally
    `expires_after`; the body is bounded by the file flags as it arrives, not by
    Litestar's whole-body limit."""
    upload = await read_upload(request, file_limits)
    try:
        await _count_request(request)  # after the body is read: the connection stays usable
        purpose = _purpose(upload)
        expires_after = expires_after_s(upload.fields)
        key = request_key(request)
        owner = _owner(request)

        def allows_model(name: str) -> bool:
            return (key is None or key.limits.allows_model(name)) and models.get(name) is not None

        lines = None
        if purpose == "batch":
            rules = BatchRules(allows_model)
            lines = await off_loop(validate_batch_file, upload.chunks(), rules)
        quota = None
        if storage_quota.enforced:  # one indexed sum here, the files' in the reservation
            held = await response_store.stored_bytes(owner)
            quota = storage_quota.for_upload(held, upload.size)
        stored = await file_store.create_from_chunks(
            owner,
            purpose,
            upload.filename or "upload",
            _async(upload.chunks()),
            line_count=lines,
            expires_after_s=expires_after,
            size=upload.size,
            quota=quota,
        )
    finally:
        upload.close()
    return wire(stored)


def _purpose(upload: Upload) -> str:
    if not upload.has_file:
        raise InvalidRequest("The form has no `file` part.", param="file")
    if not upload.purpose:
        raise InvalidRequest("The form has no `purpose` field.", param="purpose")
    if upload.purpose not in UPLOAD_PURPOSES:
        served = ", ".join(f"'{p}'" for p in UPLOAD_PURPOSES)
        shown = upload.purpose[:64]
        raise InvalidRequest(f"purpose {shown!r} is not served; served: {served}.", param="purpose")
    return upload.purpose


async def _async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@get("/v1/files")
async def list_files(request: Request[Any, Any, Any], file_store: FileStoreDep) -> FileList:
    """The key's files, newest first by default: `purpose`, `limit` (1-10000, default
    10000), `after` (a file id: the page after it) and `order` (`asc` or `desc`)."""
    await _count_request(request)
    query = request.query_params
    limit = _limit(query.get("limit"))
    order = query.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be 'asc' or 'desc'.", param="order")
    found = await file_store.list(
        _owner(request), query.get("purpose") or None, query.get("after") or None, limit + 1, order
    )
    page = [wire(file) for file in found[:limit]]
    return FileList(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(found) > limit,
    )


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return MAX_LIST_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}.", param="limit")
    return int(text)


@get("/v1/files/{file_id:str}")
async def retrieve_file(
    request: Request[Any, Any, Any], file_store: FileStoreDep, file_id: str
) -> FileWire:
    await _count_request(request)
    return wire(await file_store.get(_owner(request), file_id))


@get("/v1/files/{file_id:str}/content")
async def file_content(
    request: Request[Any, Any, Any], file_store: FileStoreDep, file_id: str
) -> Stream:
    """The file's bytes as uploaded (or written), streamed a stored chunk at a time."""
    await _count_request(request)
    owner = _owner(request)
    file = await file_store.get(owner, file_id)  # a 404 before the response starts
    disposition = f"attachment; filename*=UTF-8''{quote(file.filename, safe='')}"
    return Stream(
        file_store.content(owner, file_id),
        media_type="application/octet-stream",
        headers={"Content-Length": str(file.bytes), "Content-Disposition": disposition},
    )


@delete("/v1/files/{file_id:str}", status_code=200)
async def delete_file(
    request: Request[Any, Any, Any], file_store: FileStoreDep, file_id: str
) -> FileDeleted:
    await file_store.delete(_owner(request), file_id)
    return FileDeleted(id=file_id)


file_routes = [upload_file, list_files, retrieve_file, file_content, delete_file]
