"""The usage report: usage rows summed by key, model, day or batch, between two times, with
the requests refused before generating (`refused`, from the per-minute counts) and the
cost of the rows (`cost`, in units of the server's currency with six places, and
`cost_micros`); and its table, CSV and JSON forms (`lilac-serve usage`, GET /admin/usage).

`unpriced` counts the rows billed without a price: their model had none when the
request started (cost 0), or the row's cost is not known (written before prices were
kept, or while they could not be read).

Refusals are counted per key, minute and reason, not per model: by model they are one
row whose model is null (`-` in the table)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any, TypeAlias

from sqlalchemy import case, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.schema import prices, usage, usage_refusals
from app.tenancy.prices.money import units

# By batch: each batch's rows, and the interactive requests as one row whose batch is null.
GROUPS = {
    "key": usage.c.key_id,
    "model": usage.c.model,
    "day": usage.c.day,
    "batch": usage.c.batch_id,
}
REFUSAL_GROUPS = {"key": usage_refusals.c.key_id, "day": usage_refusals.c.day}
FORMATS = ("table", "csv", "json")
# One line of a report: its group (null for a row without one), then its counts and cost.
ReportRow: TypeAlias = dict[str, str | int | None]
COLUMNS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "total_tokens",
    "cost",
    "currency",
    "completed",
    "cancelled",
    "errors",
    "rejected",
    "refused",
    "unpriced",
)
# Summed from the rows; the other columns are made from them.
_SUMMED = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "completed",
    "cancelled",
    "errors",
    "rejected",
    "cost_micros",
    "unpriced",
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


def _unpriced() -> Any:
    """Rows billed without a price: no cost known, or none in force for the row's model
    when its request started."""
    priced = exists().where(
        prices.c.model == usage.c.model, prices.c.effective_from <= usage.c.created_at
    )
    return func.sum(case((or_(usage.c.cost_micros.is_(None), ~priced), 1), else_=0))


def _row(by: str, name: str | None, sums: dict[str, int], currency: str) -> ReportRow:
    """One report row from its sums: tokens, counts and cost (units and micro-units)."""
    row: ReportRow = {by: name, **{c: sums.get(c, 0) for c in COLUMNS}}
    row["total_tokens"] = sums.get("prompt_tokens", 0) + sums.get("completion_tokens", 0)
    row["cost_micros"] = sums.get("cost_micros", 0)
    row["cost"] = units(sums.get("cost_micros", 0))
    row["currency"] = currency
    return row


async def summarize(
    engine: AsyncEngine,
    by: str,
    since: float | None = None,
    until: float | None = None,
    currency: str = "USD",
) -> list[ReportRow]:
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
        func.sum(usage.c.cost_micros).label("cost_micros"),
        _unpriced().label("unpriced"),
    ).group_by(group)
    if since is not None:
        statement = statement.where(usage.c.created_at >= since)
    if until is not None:
        statement = statement.where(usage.c.created_at < until)
    async with engine.connect() as conn:
        rows = (await conn.execute(statement.order_by(group))).mappings().all()
        refused = await _refused(conn, by, since, until)
    out: dict[str | None, ReportRow] = {}
    for row in rows:
        out[row[by]] = _row(by, row[by], {c: int(row[c] or 0) for c in _SUMMED}, currency)
    for name, count in refused.items():
        out.setdefault(name, _row(by, name, {}, currency))["refused"] = count
    return sorted(out.values(), key=lambda item: (item[by] is None, str(item[by])))


async def _refused(
    conn: AsyncConnection, by: str, since: float | None, until: float | None
) -> dict[str | None, int]:
    """Refused requests per group. A minute's count is in the report when the minute
    overlaps [since, until)."""
    group = REFUSAL_GROUPS.get(by)
    total = func.sum(usage_refusals.c.count).label("refused")
    statement = select(total) if group is None else select(group.label(by), total)
    if group is not None:
        statement = statement.group_by(group)
    if since is not None:
        statement = statement.where(usage_refusals.c.minute > since - 60)
    if until is not None:
        statement = statement.where(usage_refusals.c.minute < until)
    rows = (await conn.execute(statement)).all()
    if group is None:
        return {None: int(rows[0][0])} if rows and rows[0][0] else {}
    return {row[0]: int(row[1]) for row in rows}


async def refusal_reasons(
    engine: AsyncEngine, since: float | None = None, until: float | None = None
) -> list[ReportRow]:
    """Refused requests per key and reason (the report's `refused`, broken down)."""
    total = func.sum(usage_refusals.c.count).label("refused")
    keys, reasons = usage_refusals.c.key_id, usage_refusals.c.reason
    statement = select(keys, reasons, total).group_by(keys, reasons).order_by(keys, reasons)
    if since is not None:
        statement = statement.where(usage_refusals.c.minute > since - 60)
    if until is not None:
        statement = statement.where(usage_refusals.c.minute < until)
    async with engine.connect() as conn:
        rows = (await conn.execute(statement)).all()
    return [{"key": k, "reason": r, "refused": int(c)} for k, r, c in rows]


def render_reasons(reasons: list[ReportRow]) -> str:
    """The refusals by key and reason, under the table (`lilac-serve usage`)."""
    if not reasons:
        return ""
    lines = [render(reasons, "key", "table", columns=("reason", "refused"))]
    return "\nrefused before generating, by key and reason:\n" + "\n".join(lines)


def render(rows: list[ReportRow], by: str, form: str, columns: tuple[str, ...] = COLUMNS) -> str:
    if form == "json":
        return json.dumps(rows, indent=2)
    header = [by, *columns]
    if form == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=header, lineterminator="\n", extrasaction="ignore"
        )
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [["-" if row[c] is None else str(row[c]) for c in header] for row in rows]
    # A list, not unpacked arguments: with no rows yet, max() gets the header alone.
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
