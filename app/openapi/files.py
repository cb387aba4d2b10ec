"""OpenAI's Files API: a key's uploaded and written files."""

from __future__ import annotations

from typing import Any

from app.openapi.common import Route
from app.schemas.files import FileDeleted, FileList, FileWire

FILE_ID = ("file_id", "path", {"type": "string"})
FILE_UPLOAD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "purpose": {"type": "string", "enum": ["batch"]},
        # OpenAI's form fields for `expires_after` (without them: --file-retention-days).
        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
        "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2592000},
    },
    "required": ["file", "purpose"],
}

ROUTES = (
    Route(
        "post",
        "/v1/files",
        "Upload a file (multipart: `file`, `purpose` `batch`, optionally `expires_after`); "
        "a batch file is checked line by line; past the key's stored-bytes quota a 413",
        FILE_UPLOAD,
        FileWire,
        body_media="multipart/form-data",
        errors=("400", "413", "415"),
    ),
    Route(
        "get",
        "/v1/files",
        "The key's files, a page at a time",
        ok=FileList,
        errors=("400", "404"),
        params=(
            ("purpose", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10000}),
            ("after", "query", {"type": "string"}),
            ("order", "query", {"type": "string", "enum": ["asc", "desc"]}),
        ),
    ),
    Route(
        "get",
        "/v1/files/{file_id}",
        "One of the key's files",
        ok=FileWire,
        errors=("404",),
        params=(FILE_ID,),
    ),
    Route(
        "get",
        "/v1/files/{file_id}/content",
        "A file's content, as uploaded or written",
        ok={"type": "string", "format": "binary"},
        ok_media="application/octet-stream",
        errors=("404",),
        params=(FILE_ID,),
    ),
    Route(
        "delete",
        "/v1/files/{file_id}",
        "Delete one of the key's files",
        ok=FileDeleted,
        errors=("404",),
        params=(FILE_ID,),
    ),
)
