"""The stored-bytes quota: how many bytes one owner (a key, or the anonymous owner of a
keyless server) may keep stored, across its files (uploads, and the output and error
files of its batches) and its stored responses.

Only an upload is refused for it (`StorageQuotaExceeded`, 413): what the server writes
for the owner (a batch's output, a stored response) is counted but never dropped, so
those may take an owner past its quota, and its next upload is then refused. The file
store applies the check inside the transaction that reserves the upload's bytes
(app.storage.files), so concurrent uploads of one owner cannot pass it together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.config.settings import Settings
from app.errors import StorageQuotaExceeded


@dataclass(frozen=True, slots=True)
class StoredBytesQuota:
    max_bytes: int  # 0: no quota

    @classmethod
    def from_settings(cls, settings: Settings) -> StoredBytesQuota:
        if settings.max_stored_bytes_per_key < 0:
            raise ValueError("--max-stored-bytes-per-key must be 0 (no quota) or more")
        return cls(settings.max_stored_bytes_per_key)

    @property
    def enforced(self) -> bool:
        return self.max_bytes > 0

    def check(self, held: int, adding: int) -> None:
        """Refuse adding `adding` bytes to an owner holding `held`, if that passes the
        quota."""
        if self.enforced and held + adding > self.max_bytes:
            raise StorageQuotaExceeded(held, adding, self.max_bytes)

    def for_upload(self, held_elsewhere: int, adding: int) -> Callable[[int], None] | None:
        """The check the file store runs on the owner's file bytes, with `held_elsewhere`
        (its stored responses) added; None without a quota (nothing to check)."""
        if not self.enforced:
            return None
        return lambda held_in_files: self.check(held_in_files + held_elsewhere, adding)
