"""Wire types of /v1/files: OpenAI's File object, its list and its deletion."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct


class FileWire(Struct):
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: str
    expires_at: int | None
    object: Literal["file"] = "file"


class FileList(Struct):
    data: list[FileWire]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


class FileDeleted(Struct):
    id: str
    deleted: bool = True
    object: Literal["file"] = "file"
