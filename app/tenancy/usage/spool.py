"""The files beside the database where usage records wait or are kept.

The spool (JSON lines, fsynced, append-only) holds the records `UsageWriter` could not
commit because the database is down, until it replays them; the dead-letter file
(`usage-dead-letter.jsonl`, beside the spool) keeps what neither the database nor the
spool will take: a record the database refuses when even `usage_dead_letter` fails, a
spooled line that does not parse. Only the writer's task touches either file, so
whether the spool holds records is known without asking the disk after the first look
(the writer asks before every commit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from app.tenancy.usage.records import DEAD_LETTER_FILE, UsageRecord, record_line


class UsageSpool:
    """The spool file at `path` and the dead-letter file beside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dead_letter_file = path.with_name(DEAD_LETTER_FILE)
        self._holds: bool | None = None  # None: not known (first look, or a failed write)

    def has_records(self) -> bool:
        if self._holds is None:
            self._holds = self.path.exists() and self.path.stat().st_size > 0
        return self._holds

    def append(self, records: list[UsageRecord]) -> None:
        self._holds = None  # a failed append may have left part of a line
        _append_lines(self.path, [record_line(r) for r in records])
        self._holds = True

    def lines(self) -> list[str]:
        """The spool's lines, records or not (OSError when it cannot be read)."""
        return self.path.read_text(encoding="utf-8").splitlines()

    def rewrite(self, records: list[UsageRecord]) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        with open(partial, "w", encoding="utf-8") as file:
            file.write("".join(record_line(r) for r in records))
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, self.path)  # atomic: a crash leaves the old spool or the new
        self._holds = bool(records)

    def remove(self) -> None:
        self._holds = None
        self.path.unlink()
        self._holds = False

    def keep_dead_letter(self, entry: Mapping[str, object]) -> None:
        _append_lines(self.dead_letter_file, [json.dumps(entry) + "\n"])


def _append_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write("".join(lines))
        file.flush()
        os.fsync(file.fileno())
