"""A stored file's row as the API shows it, and the conditions every read of the files
table shares: whether a file is live (not expired), and the bytes an owner holds."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.engine import Row

from app.db.schema import files

PROCESSED = "processed"
UPLOADING = "uploading"


@dataclass(frozen=True, slots=True)
class FileObject:
    """OpenAI's File object, plus `line_count`: the file's non-blank lines (for a
    batch input file, its requests)."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    line_count: int
    status: str = PROCESSED
    expires_at: int | None = None
    object: str = "file"


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


def file_object(row: Row[tuple[object, ...]]) -> FileObject:
    m = row._mapping
    expires = m["expires_at"]
    return FileObject(
        id=m["id"],
        bytes=int(m["bytes"]),
        created_at=int(m["created_at"]),
        filename=m["filename"],
        purpose=m["purpose"],
        line_count=int(m["line_count"]),
        status=m["status"],
        expires_at=None if expires is None else int(expires),
    )


def live(now: float) -> ColumnElement[bool]:
    """A file not expired at `now`."""
    return or_(files.c.expires_at.is_(None), files.c.expires_at > now)


def held_bytes(owner: str, now: float, but: int | None = None) -> Select[tuple[int]]:
    """The bytes of `owner`'s files live at `now`, uploads under way included (`but`:
    leaving out the file of that primary key)."""
    conditions = [files.c.owner == owner, live(now)]
    if but is not None:
        conditions.append(files.c.pk != but)
    return select(func.coalesce(func.sum(files.c.bytes), 0)).where(*conditions)
