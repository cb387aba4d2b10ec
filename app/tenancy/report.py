"""The usage report: usage rows summed by key, model or day, between two times; and
its table, CSV and JSON forms (`lilac-serve usage`, GET /admin/usage)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.schema import usage

GROUPS = {"key": usage.c.key_id, "model": usage.c.model, "day": usage.c.day}
FORMATS = ("table", "csv", "json")
COLUMNS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "total_tokens",
    "completed",
    "cancelled",
    "errors",
    "rejected",
)


def parse_time(text: str | None) -> float | None:
    """`2026-11-30`, `2026-11-30T12:00`, an ISO time with zone, or Unix seconds; UTC
    when no zone is given."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        example = "e.g. 2026-11-30 or 2026-11-30T12:00"
        raise ValueError(f"not a date or time: {text!r} ({example})") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def _count(outcome: str) -> Any:
    return func.sum(func.cast(usage.c.outcome == outcome, usage.c.n.type))


async def summarize(
    engine: AsyncEngine, by: str, since: float | None = None, until: float | None = None
) -> list[dict[str, Any]]:
    if by not in GROUPS:
        raise ValueError(f"--by must be one of {', '.join(GROUPS)}, not {by!r}")
    group = GROUPS[by]
    statement = select(
        group.label(by),
        func.count().label("requests"),
        func.sum(usage.c.prompt_tokens).label("prompt_tokens"),
        func.sum(usage.c.cached_tokens).label("cached_tokens"),
        func.sum(usage.c.completion_tokens).label("completion_tokens"),
        func.sum(usage.c.reasoning_tokens).label("reasoning_tokens"),
        _count("completed").label("completed"),
        _count("cancelled").label("cancelled"),
        _count("error").label("errors"),
        _count("rejected").label("rejected"),
    ).group_by(group)
    if since is not None:
        statement = statement.where(usage.c.created_at >= since)
    if until is not None:
        statement = statement.where(usage.c.created_at < until)
    async with engine.connect() as conn:
        rows = (await conn.execute(statement.order_by(group))).mappings().all()
    out = []
    for row in rows:
        item = {by: row[by], **{c: int(row[c] or 0) for c in COLUMNS if c != "total_tokens"}}
        item["total_tokens"] = item["prompt_tokens"] + item["completion_tokens"]
        out.append({by: item[by], **{c: item[c] for c in COLUMNS}})
    return out


def render(rows: list[dict[str, Any]], by: str, form: str) -> str:
    if form == "json":
        return json.dumps(rows, indent=2)
    header = [by, *COLUMNS]
    if form == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [[str(row[c]) for c in header] for row in rows]
    # A list, not unpacked arguments: with no rows yet, max() gets the header alone.
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
