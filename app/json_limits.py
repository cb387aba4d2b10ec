"""Bounds on JSON nesting, checked on raw bytes before anything parses them.

msgspec and `json` recurse per level of nesting: about a thousand levels (a few
kilobytes of `[`) exhaust the recursion limit, and would do so even inside a field
the request ignores. `json_depth` finds the deepest nesting without recursing and in
time linear in the bytes, whatever they hold (numpy, a fixed number of passes):

1. a quote is escaped when the run of backslashes right before it is odd (the run's
   length comes from a running maximum of the last position that is not a backslash);
2. the unescaped quotes toggle "inside a string" (a running xor);
3. the brackets outside strings give +1 / -1, and their running sum is the depth.

Over any prefix of a valid JSON document each step is exact (backslashes occur only
inside strings, where a run of them escapes the quote after it iff it is odd), so the
depth found at each point is the depth a parser has reached there. A parser that
recurses deeper than the bound must first read a valid prefix that deep: it never
gets there, because the scan refuses the document first. Bytes that are not valid
JSON may be scored anything; the parser refuses them anyway.

About 5-15 ms for a megabyte (numpy releases the GIL in its loops), so large bodies
are scanned off the event loop (app.request_body).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# A request nests about 6 levels (messages, content parts, tool schemas add their
# own); schemas are bounded separately, at fewer levels than this.
MAX_BODY_DEPTH = 64

_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def json_depth(raw: bytes | str) -> int:
    """The deepest nesting of arrays and objects in `raw` (0 for a scalar)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    codes = np.frombuffer(data, dtype=np.uint8)
    steps = _STEP[codes]
    quotes = np.flatnonzero(codes == _QUOTE)
    if quotes.size:
        if b"\\" in data:
            quotes = quotes[~_escaped(codes, quotes)]
        toggles = np.zeros(codes.size, dtype=np.uint8)
        toggles[quotes] = 1
        inside = np.bitwise_xor.accumulate(toggles).view(bool)
        steps[inside] = 0  # a quote itself has no step: inclusive or not, the same
    brackets = steps[steps != 0]
    if not brackets.size:
        return 0
    return max(0, int(np.cumsum(brackets, dtype=np.int64).max()))


def _escaped(codes: npt.NDArray[np.uint8], quotes: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """Per quote position: whether an odd run of backslashes ends right before it."""
    # 32-bit positions where they fit: half the memory traffic of the default.
    kind = np.int32 if codes.size < 2**31 else np.int64
    positions = np.arange(codes.size, dtype=kind)
    # The last position at or before each one that is not a backslash (-1: none).
    plain = np.where(codes == _BACKSLASH, -1, positions)
    last_plain = np.maximum.accumulate(plain)
    before = quotes - 1
    run = np.where(before >= 0, before - last_plain[np.maximum(before, 0)], 0)
    return (run & 1).astype(bool)


def too_deep(raw: bytes | str, limit: int = MAX_BODY_DEPTH) -> bool:
    """Whether `raw` nests deeper than `limit`. Most documents have fewer opening
    brackets than the limit in all, which a count (C speed) shows without a scan."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return json_depth(data) > limit
