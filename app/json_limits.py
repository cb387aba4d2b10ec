"""Bounds on JSON nesting, checked on raw bytes before anything parses them.

msgspec and `json` recurse per level of nesting: about a thousand levels (a few
kilobytes of `[`) exhaust the recursion limit, and would do so even inside a field
the request ignores. `json_depth` finds the deepest nesting with a scan that does
not recurse: strings are cut out with one regular expression, then a running sum
over the brackets left (numpy) gives the depth at every point. About 10-90 ms for a
megabyte, so large bodies are scanned off the event loop (app.request_body).
"""

from __future__ import annotations

import re

import numpy as np

# A request nests about 6 levels (messages, content parts, tool schemas add their
# own); schemas are bounded separately, at fewer levels than this.
MAX_BODY_DEPTH = 64

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OTHER_BYTES = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[list(b"[{")] = 1
_OPEN[list(b"]}")] = -1


def json_depth(raw: bytes | str) -> int:
    """The deepest nesting of arrays and objects in `raw` (0 for a scalar)."""
    data = raw.encode() if isinstance(raw, str) else raw
    brackets = _STRING.sub(b"", data).translate(None, _OTHER_BYTES)
    if not brackets:
        return 0
    steps = _OPEN[np.frombuffer(brackets, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max())


def too_deep(raw: bytes | str, limit: int = MAX_BODY_DEPTH) -> bool:
    """Whether `raw` nests deeper than `limit`. Most documents have fewer opening
    brackets than the limit in all, which a count (C speed) shows without a scan."""
    data = raw.encode() if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return json_depth(data) > limit
