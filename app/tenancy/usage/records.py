"""Usage records and the rows they become.

Each request becomes one `UsageRecord`; `record_row` and `record_line` turn it into a database row
and a spool line (JSON), `parse_record` reads a spool line back. The writer that makes records
durable (group commits, the spool, dead letters, refusal counts) is `UsageWriter`, in
`app.tenancy.usage.writer`; its spool and dead-letter files are `app.tenancy.usage.spool`.
"""

from __future__ import annotations

import functools
import json
import operator
import time
from typing import TypeAlias

import msgspec

OUTCOMES = ("completed", "cancelled", "drained", "error", "rejected")
DEAD_LETTER_FILE = "usage-dead-letter.jsonl"


class UsageRecord(msgspec.Struct, gc=False):
    """One request's usage: a row of `usage`. A msgspec Struct, made in C (one per
    metered request), holding only scalars (so the collector need not track it)."""

    request_id: str
    key_id: str | None
    model: str
    endpoint: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    n: int
    outcome: str
    queue_ms: float | None
    ttft_ms: float | None
    duration_ms: float
    created_at: float
    day: str = ""
    client_request_id: str | None = None  # the client's X-Request-Id, when it sent one
    batch_id: str | None = None  # the batch this work belongs to (None: interactive)
    # Its cost in micro-units of the server's currency (None: not known), set as it is
    # written (app.tenancy.prices.store).
    cost_micros: int | None = None

    def __post_init__(self) -> None:
        if not self.day:
            self.day = day_of(self.created_at)


def day_of(seconds: float) -> str:
    # Every record of a day asks for the same text: the last day's is kept.
    number = int(seconds // 86400)
    if number != _last_day[0]:
        _last_day[:] = [number, time.strftime("%Y-%m-%d", time.gmtime(seconds))]
    return str(_last_day[1])


_last_day: list[int | str] = [-1, ""]

# What a usage row's columns hold (UsageRecord's fields are these scalars), and a row as
# the SQLite inserts take it: a record's values in `FIELDS` order.
UsageValue: TypeAlias = str | int | float | None
UsageRow: TypeAlias = tuple[UsageValue, ...]

FIELDS = UsageRecord.__struct_fields__
record_values = operator.attrgetter(*FIELDS)  # a record's values in FIELDS order
_ROW = f"({', '.join('?' * len(FIELDS))})"
SQLITE_INSERT = (
    f"INSERT INTO usage ({', '.join(FIELDS)}) VALUES {_ROW} ON CONFLICT (request_id) DO NOTHING"
)


@functools.cache
def sqlite_insert(rows: int) -> str:
    """One statement that inserts `rows` records (their values one after the other)."""
    values = ", ".join([_ROW] * rows)
    return (
        f"INSERT INTO usage ({', '.join(FIELDS)}) VALUES {values} "
        "ON CONFLICT (request_id) DO NOTHING"
    )


def record_row(record: UsageRecord) -> dict[str, UsageValue]:
    return msgspec.structs.asdict(record)


def record_line(record: UsageRecord) -> str:
    return json.dumps(record_row(record)) + "\n"


def parse_record(line: str) -> UsageRecord | None:
    if not line.strip():
        return None
    try:
        return UsageRecord(**json.loads(line))
    except (ValueError, TypeError):
        return None


def describe(record: UsageRecord) -> dict[str, UsageValue]:
    return record_row(record)
