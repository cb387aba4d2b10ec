"""Lines out of a stream of byte chunks, in time linear in the bytes.

A line may span many chunks (one request of a JSONL file can be megabytes): its pieces
are kept in a list and joined once, when its end arrives, never re-copied per chunk.
Lines come without their ending (`\\n`, or `\\r\\n`); blank lines (nothing but
whitespace) are skipped, so every line counted is one a reader acts on.
"""

from __future__ import annotations


class LineSplitter:
    """Feed chunks, get the complete lines so far with their numbers (1-based, every
    line of the content counted, blank ones too); `finish` gives the last one."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._number = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            if chunk:
                self._pieces.append(chunk)
            return []
        first = parts[0]
        if self._pieces:
            self._pieces.append(first)
            first = b"".join(self._pieces)
            self._pieces = []
        out = []
        for part in (first, *parts[1:-1]):
            self._number += 1
            line = _line(part)
            if line is not None:
                out.append((self._number, line))
        if parts[-1]:
            self._pieces.append(parts[-1])
        return out

    def finish(self) -> tuple[int, bytes] | None:
        """The last line, when the content does not end with a newline."""
        last = _line(b"".join(self._pieces))
        self._pieces = []
        if last is None:
            return None
        self._number += 1
        return self._number, last


def _line(raw: bytes) -> bytes | None:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw if raw.strip() else None


class LineCounter:
    """Counts the non-blank lines of a stream of chunks without keeping them: the
    state between chunks is whether the line in progress has a non-blank byte yet."""

    def __init__(self) -> None:
        self.count = 0
        self._open_has_text = False

    def feed(self, chunk: bytes) -> int:
        """Count `chunk`'s completed lines; the running total."""
        parts = chunk.split(b"\n")
        for part in parts[:-1]:
            if self._open_has_text or part.strip():
                self.count += 1
            self._open_has_text = False
        if parts[-1].strip():
            self._open_has_text = True
        return self.count

    def finish(self) -> int:
        if self._open_has_text:
            self.count += 1
            self._open_has_text = False
        return self.count
