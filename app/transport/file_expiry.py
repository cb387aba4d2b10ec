"""An upload's `expires_after` (OpenAI's form fields `expires_after[anchor]`, which must
be `created_at`, and `expires_after[seconds]`, from an hour to 30 days): the seconds
after its creation a file expires, or None where the form names no expiry (the server's
`--file-retention-days` then applies)."""

from __future__ import annotations

from collections.abc import Mapping

from app.errors import InvalidRequest

ANCHOR = "expires_after[anchor]"
SECONDS = "expires_after[seconds]"
MIN_SECONDS = 3600
MAX_SECONDS = 2_592_000


def expires_after_s(fields: Mapping[str, str]) -> int | None:
    anchor, seconds = fields.get(ANCHOR), fields.get(SECONDS)
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        shown = "missing" if anchor is None else repr(anchor[:64])
        raise InvalidRequest(
            f"expires_after[anchor] must be 'created_at' (it is {shown}).", param=ANCHOR
        )
    if seconds is None or not seconds.isdigit() or not MIN_SECONDS <= int(seconds) <= MAX_SECONDS:
        raise InvalidRequest(
            f"expires_after[seconds] must be an integer from {MIN_SECONDS} to {MAX_SECONDS}.",
            param=SECONDS,
        )
    return int(seconds)
