"""Checking a batch input file at upload, line by line, in time linear in its bytes.

Each non-blank line must be a JSON object with a string `custom_id` (unique in the
file), `method` `POST`, a `url` among `BATCH_ENDPOINTS` and a `body` object whose
`model` the key may use and the server serves. The first line that fails is an
`InvalidFileLine` (400) naming the line's number and its `custom_id`. What only running
a line can tell (a body the endpoint refuses) is reported then, in the batch's error file.

Only the top level of a line is decoded (its values stay raw bytes), then `body` as an
object whose one read field is `model`: the rest is skipped by msgspec without being
built. A line nesting deeper than `MAX_BODY_DEPTH` is refused before decoding (see
app.transport.json_limits), as a request body would be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from app.errors import InvalidFileLine
from app.storage.lines import LineSplitter
from app.transport.json_limits import MAX_BODY_DEPTH, too_deep

# The endpoints a batch line may call: the one list the upload check and the batches
# read (an endpoint served later is added here).
BATCH_ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/v1/responses")

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STR = msgspec.json.Decoder(str)


class _Body(msgspec.Struct):
    model: str | None = None


_BODY = msgspec.json.Decoder(_Body)


@dataclass(frozen=True, slots=True)
class BatchRules:
    """What a line may ask for: `allows_model(name)` says whether the key may use the
    model and the server serves it."""

    allows_model: Callable[[str], bool]
    endpoints: tuple[str, ...] = BATCH_ENDPOINTS


def validate_batch_file(chunks: Iterable[bytes], rules: BatchRules) -> int:
    """Check every line of the content `chunks` make; the number of request lines.
    Raises `InvalidFileLine` at the first line that cannot run."""
    splitter = LineSplitter()
    seen: set[str] = set()
    for chunk in chunks:
        for number, line in splitter.feed(chunk):
            check_line(number, line, rules, seen)
    last = splitter.finish()
    if last is not None:
        check_line(*last, rules, seen)
    return len(seen)


def check_line(number: int, line: bytes, rules: BatchRules, seen: set[str]) -> None:
    """Check one line (its 1-based `number`); its `custom_id` joins `seen`."""
    # Only a line with many brackets can nest deeply: the others skip the scan.
    if line.count(b"[") + line.count(b"{") > MAX_BODY_DEPTH and too_deep(line):
        raise InvalidFileLine(
            number, None, f"the line nests JSON deeper than {MAX_BODY_DEPTH} levels"
        )
    try:
        fields = _TOP.decode(line)
    except msgspec.ValidationError:
        raise InvalidFileLine(number, None, "the line is not a JSON object") from None
    except msgspec.DecodeError as exc:
        raise InvalidFileLine(number, None, f"the line is not valid JSON ({exc})") from None
    custom_id = _custom_id(number, fields)
    if custom_id in seen:
        raise InvalidFileLine(number, custom_id, "custom_id is used by an earlier line")
    method = _string(number, custom_id, fields, "method")
    if method != "POST":
        raise InvalidFileLine(number, custom_id, f"method {method!r} is not supported; use 'POST'")
    url = _string(number, custom_id, fields, "url")
    if url not in rules.endpoints:
        served = ", ".join(rules.endpoints)
        shown = url if len(url) <= 100 else url[:100] + "..."
        raise InvalidFileLine(number, custom_id, f"url {shown!r} is not served; served: {served}")
    _check_body(number, custom_id, fields, rules)
    seen.add(custom_id)


def _custom_id(number: int, fields: dict[str, msgspec.Raw]) -> str:
    raw = fields.get("custom_id")
    if raw is None:
        raise InvalidFileLine(number, None, "custom_id is missing")
    try:
        return _STR.decode(raw)
    except msgspec.DecodeError:
        raise InvalidFileLine(number, None, "custom_id must be a string") from None


def _string(number: int, custom_id: str, fields: dict[str, msgspec.Raw], name: str) -> str:
    raw = fields.get(name)
    if raw is None:
        raise InvalidFileLine(number, custom_id, f"{name} is missing")
    try:
        return _STR.decode(raw)
    except msgspec.DecodeError:
        raise InvalidFileLine(number, custom_id, f"{name} must be a string") from None


def _check_body(
    number: int, custom_id: str, fields: dict[str, msgspec.Raw], rules: BatchRules
) -> None:
    raw = fields.get("body")
    if raw is None:
        raise InvalidFileLine(number, custom_id, "body is missing")
    try:
        body = _BODY.decode(raw)
    except msgspec.ValidationError:
        raise InvalidFileLine(
            number, custom_id, "body must be an object with a string model"
        ) from None
    if body.model is None:
        raise InvalidFileLine(number, custom_id, "body.model is missing")
    if not rules.allows_model(body.model):
        shown = body.model if len(body.model) <= 100 else body.model[:100] + "..."
        raise InvalidFileLine(
            number,
            custom_id,
            f"the model {shown!r} does not exist or you do not have access to it",
        )
