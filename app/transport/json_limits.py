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

The bytes are scanned in chunks of 64 KiB, the state carried from one to the next (the
backslashes the chunk ends with, inside a string or not, the depth). About 5-15 ms for
a megabyte (numpy releases the GIL in its loops), so large bodies are scanned off the
event loop (app.transport.request_body).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# A request nests about 6 levels (messages, content parts, tool schemas add their
# own); schemas are bounded separately, at fewer levels than this.
MAX_BODY_DEPTH = 64
# Bytes scanned at a time: the scan's arrays stay in the CPU's cache (a few bytes of
# state per byte), so its time per byte does not grow with the body.
CHUNK_BYTES = 64 * 1024

_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def json_depth(raw: bytes | str, chunk: int = CHUNK_BYTES) -> int:
    """The deepest nesting of arrays and objects in `raw` (0 for a scalar)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    scan = _Scan()
    view = memoryview(data)
    for start in range(0, len(data), chunk):
        scan.feed(np.frombuffer(view[start : start + chunk], dtype=np.uint8))
    return scan.deepest


class _Scan:
    """The scan's state between chunks: the backslashes that end the bytes so far,
    whether they end inside a string, the depth there and the deepest so far."""

    def __init__(self) -> None:
        self.trailing_backslashes = 0
        self.inside = False
        self.depth = 0
        self.deepest = 0

    def feed(self, codes: npt.NDArray[np.uint8]) -> None:
        steps = _STEP[codes]
        backslashes = codes == _BACKSLASH
        quotes = np.flatnonzero(codes == _QUOTE)
        if quotes.size:
            if self.trailing_backslashes or backslashes.any():
                quotes = quotes[~self._escaped(backslashes, quotes)]
            toggles = np.zeros(codes.size, dtype=np.uint8)
            toggles[quotes] = 1
            inside = np.bitwise_xor.accumulate(toggles).view(bool)
            if self.inside:
                inside = ~inside
            steps[inside] = 0  # a quote itself has no step: inclusive or not, the same
            self.inside ^= bool(quotes.size & 1)
        elif self.inside:  # the whole chunk is inside one string
            steps[:] = 0
        brackets = steps[steps != 0]
        if brackets.size:
            depths = np.cumsum(brackets, dtype=np.int64) + self.depth
            self.deepest = max(self.deepest, int(depths.max()))
            self.depth = int(depths[-1])
        self._count_trailing(backslashes)

    def _escaped(
        self, backslashes: npt.NDArray[np.bool_], quotes: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.bool_]:
        """Per quote: whether an odd run of backslashes ends right before it (a run may
        begin in an earlier chunk)."""
        positions = np.arange(backslashes.size, dtype=np.int32)
        # The last position at or before each one that is not a backslash (-1: none yet).
        last_plain = np.maximum.accumulate(np.where(backslashes, -1, positions))
        before = quotes - 1
        previous = last_plain[np.maximum(before, 0)]
        carried = self.trailing_backslashes
        # A quote at the chunk's start: only the carried run; else the run back to the
        # last plain byte, or through the chunk's start into the carried run.
        run = np.where(
            before < 0, carried, np.where(previous < 0, before + 1 + carried, before - previous)
        )
        return (run & 1).astype(bool)

    def _count_trailing(self, backslashes: npt.NDArray[np.bool_]) -> None:
        if not backslashes.size or not backslashes[-1]:
            self.trailing_backslashes = 0
            return
        plain = np.flatnonzero(~backslashes[::-1])
        if plain.size:
            self.trailing_backslashes = int(plain[0])
        else:
            self.trailing_backslashes += int(backslashes.size)


def too_deep(raw: bytes | str, limit: int = MAX_BODY_DEPTH) -> bool:
    """Whether `raw` nests deeper than `limit`. Most documents have fewer opening
    brackets than the limit in all, which a count (C speed) shows without a scan."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return json_depth(data) > limit
